"""Spark executors over TLS: a real local SparkSession against a master and table servers
served over Flight with TLS and a token. ``register(spark, tls_ca=...)`` ships the CA's
text, so the Python workers (stream sink tasks, backfill tasks, batch-read tasks and the
processes that plan and commit) check the servers' certificates with no file of their
own; a use whose ``tls_ca`` option names another CA, or whose address is clear text, fails
naming the reason."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memtier.certificates import CertificateFiles
from tests.support.rpccluster import RpcCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]
pytest.importorskip("pyspark")

TOKEN = "spark-tls-token"
SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.float64())])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pki: CertificateFiles) -> Iterator[RpcCluster]:
    running = RpcCluster(str(tmp_path_factory.mktemp("memtier-spark-tls")), token=TOKEN, tls=pki)
    running.add_server("ts-0")
    running.add_server("ts-1")
    yield running
    running.close()


@pytest.fixture(scope="module")
def spark(cluster: RpcCluster, pki: CertificateFiles) -> Iterator[Any]:
    import memtier.spark
    from tests.support.spark import local_session

    session = local_session()
    memtier.spark.register(session, address=cluster.address, token=TOKEN, tls_ca=pki.ca)
    yield session
    session.stop()


def rows(ids: range, ts: int) -> pa.Table:
    return pa.table({"id": list(ids), "ts": [ts] * len(ids), "city": [("ams", "ber")[i % 2] for i in ids],
                     "v": [float(i * ts) for i in ids]}, schema=SCHEMA)


def latest(*batches: pa.Table) -> pa.Table:
    """The row of the highest ts per key."""
    kept: dict[int, dict[str, Any]] = {}
    for batch in batches:
        for row in batch.to_pylist():
            if row["id"] not in kept or row["ts"] >= kept[row["id"]]["ts"]:
                kept[row["id"]] = row
    return pa.Table.from_pylist(sorted(kept.values(), key=lambda r: r["id"]), schema=SCHEMA)


def test_spark_executors_stream_backfill_and_read_over_tls(cluster: RpcCluster, spark: Any, tmp_path: Path) -> None:
    from memtier.spark.types import spark_schema

    client = cluster.client()
    assert cluster.address.startswith("grpc+tls://")
    table = f"t_{uuid.uuid4().hex[:8]}"
    client.create_table(table, SCHEMA, record_key="id", ordering_field="ts", partition_fields="city", buckets=4)
    source = tmp_path / "in"
    source.mkdir()
    streamed = [rows(range(0, 300), 2), rows(range(200, 500), 3)]
    for i, batch in enumerate(streamed):
        pq.write_table(batch, source / f"{i}.parquet")
    query = (spark.readStream.schema(spark_schema(SCHEMA)).option("maxFilesPerTrigger", 1).parquet(str(source))
             .writeStream.format("memtier").option("table", table)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    backfilled = rows(range(0, 600), 1)  # ts 1: older than every streamed row of the same key
    spark.createDataFrame(backfilled.to_pandas()).repartition(2).write.format("memtier").option(
        "table", table).mode("append").save()
    expected = latest(backfilled, *streamed)
    assert client.read(table, mode="committed").sort_by("id").equals(expected)
    read = spark.read.format("memtier").option("table", table).load().toArrow().sort_by("id")
    assert read.equals(expected)


def test_an_executor_trusting_another_ca_is_refused(cluster: RpcCluster, spark: Any, other_pki: CertificateFiles) -> None:
    with pytest.raises(Exception, match="presented a certificate this client does not trust"):
        spark.read.format("memtier").option("table", "any").option("tls_ca", other_pki.ca).load().collect()


def test_a_clear_text_address_is_refused(cluster: RpcCluster, spark: Any) -> None:
    plain = cluster.address.replace("grpc+tls://", "grpc://")
    with pytest.raises(Exception, match="speaks TLS and this client spoke clear text to it"):
        spark.read.format("memtier").option("table", "any").option("address", plain).load().collect()
