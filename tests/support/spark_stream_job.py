"""A streaming ingest job in its own process (so a test can SIGKILL it mid-batch): input
Parquet files, one per micro-batch, into a memtier table through ``format("memtier")``.
The cluster comes from ``$MEMTIER_CLUSTER_ADDRESS``.

    python -m tests.support.spark_stream_job TABLE SOURCE CHECKPOINT SECONDS_PER_BATCH
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pyarrow.parquet as pq


def main() -> None:
    table, source, checkpoint, pause = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.types import LongType

    import memtier.spark
    from memtier.spark.types import spark_schema
    from tests.support.spark import local_session

    spark = local_session("memtier-stream-job")
    memtier.spark.register(spark)  # the cluster named by $MEMTIER_CLUSTER_ADDRESS

    def slow(value: int) -> int:
        if value % 500 == 0:
            time.sleep(pause)
        return value

    schema = spark_schema(pq.read_schema(min(Path(source).glob("*.parquet"))))
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(source)
    df = df.withColumn("id", F.udf(slow, LongType())("id"))
    query = (df.writeStream.format("memtier").option("table", table)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
