"""Spark reading and writing memtier tables, against Spark on plain Parquet in the same run.

    .venv/bin/python -m bench.spark --rows 2000000

Reads: a table with N rows in Hudi files, 10% of them updated and still in table-server
memory, read by ``format("memtier")`` (every row through Spark: the ``noop`` sink) and by
``client.read``; the baseline is ``spark.read.parquet`` of the same N rows. Writes: the
same rows as a backfill (``df.write.format("memtier")``) and through the streaming sink
(one micro-batch per input file, ``availableNow``), against ``df.write.parquet`` and a
Parquet streaming sink over the same input.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from bench.common import bench_table, best_of, report

HEADER = ["workload", "system", "rows", "median s", "rows/s", "x baseline"]


def _session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _stream(spark: Any, schema: Any, source: Path, sink: dict[str, str], checkpoint: Path) -> None:
    writer = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source)).writeStream
    fmt = sink.pop("format")
    for key, value in sink.items():
        writer = writer.option(key, value)
    writer.format(fmt).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start() \
        .awaitTermination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--files", type=int, default=4, help="input files (micro-batches) of the streams")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()

    import memtier
    import memtier.spark
    from memtier.spark.types import spark_schema

    root = Path(args.dir or tempfile.mkdtemp(prefix="memtier-bench-spark-"))
    data = bench_table(args.rows)
    updates = bench_table(args.rows // 10, seed=4, ts=2,
                          keys=np.random.default_rng(3).choice(args.rows, args.rows // 10, replace=False))
    plain = root / "plain"
    plain.mkdir()
    for i in range(args.files):  # the streams' input, and the read baseline
        pq.write_table(data.slice(i * args.rows // args.files, args.rows // args.files), plain / f"{i}.parquet")
    cluster = memtier.start_local(str(root / "memtier"), table_servers=1, config={"services.workers": "0"})
    spark = _session()
    try:
        memtier.spark.register(spark)
        client = cluster.client()
        client.create_table("read", data.schema, record_key="key", ordering_field="ts", buckets=args.buckets)
        client.write("read", data)
        client.flush("read")
        client.write("read", updates)
        rows: list[list[Any]] = []

        def cell(workload: str, system: str, fn: Any, baseline: float | None) -> float:
            seconds, _ = best_of(args.repeat, fn)
            rows.append([workload, system, args.rows, round(seconds, 3), round(args.rows / seconds),
                         round(baseline / seconds, 2) if baseline else 1.0])
            return seconds

        base = cell("read", "spark.read.parquet", lambda: spark.read.parquet(str(plain)).write.format("noop")
                    .mode("overwrite").save(), None)
        cell("read", "format(memtier)", lambda: spark.read.format("memtier").option("table", "read").load()
             .write.format("noop").mode("overwrite").save(), base)
        cell("read", "client.read", lambda: client.read("read"), base)

        df = spark.read.parquet(str(plain)).cache()
        df.count()
        runs = iter(range(10**6))
        base = cell("backfill", "df.write.parquet", lambda: df.write.mode("overwrite").parquet(
            str(root / "out-parquet")), None)

        def backfill() -> None:
            name = f"backfill_{next(runs)}"
            client.create_table(name, data.schema, record_key="key", ordering_field="ts", buckets=args.buckets)
            df.write.format("memtier").option("table", name).mode("append").save()

        cell("backfill", "format(memtier)", backfill, base)
        schema = spark_schema(data.schema)

        def parquet_stream() -> None:
            run = next(runs)
            _stream(spark, schema, plain, {"format": "parquet", "path": str(root / f"stream-{run}")},
                    root / f"ckpt-{run}")

        def memtier_stream() -> None:
            name = f"stream_{next(runs)}"
            client.create_table(name, data.schema, record_key="key", ordering_field="ts", buckets=args.buckets)
            _stream(spark, schema, plain, {"format": "memtier", "table": name}, root / f"ckpt-{name}")

        base = cell("stream", "parquet sink", parquet_stream, None)
        cell("stream", "memtier sink", memtier_stream, base)
    finally:
        spark.stop()
        cluster.shutdown()
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    report("spark", HEADER, rows, {"buckets": args.buckets, "files": args.files,
                                   "repeat": args.repeat, "updates_in_memory": args.rows // 10})


if __name__ == "__main__":
    main()
