"""``format("memtier")`` on a real local SparkSession against a real cluster (master and
table servers over Flight): batch reads equal ``client.read`` and a model with rows in
files, memory and WAL-only blocks at once; the streaming sink survives failed and
replayed micro-batches exactly once; the change feed resumes from its checkpoint missing
and repeating nothing; backfills land in files beside the tier's flushes and merge by
ordering value (tests/integration/test_log_write_order.py interleaves them step by step)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memtier.client import Transaction
from tests.support.hudirs import hudi_rs_read
from tests.support.rpccluster import RpcCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]
pytest.importorskip("pyspark")

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.float64())])
CITIES = ["ams", "ber", "lis"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RpcCluster]:
    running = RpcCluster(str(tmp_path_factory.mktemp("memtier-spark")))
    running.add_server("ts-0")
    running.add_server("ts-1")
    yield running
    running.close()


@pytest.fixture(scope="module")
def spark(cluster: RpcCluster) -> Iterator[Any]:
    import memtier.spark
    from tests.support.spark import local_session

    session = local_session()
    memtier.spark.register(session, address=cluster.address)
    yield session
    session.stop()


def rows(ids: range | list[int], ts: int) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "ts": [ts] * len(ids), "city": [CITIES[i % 3] for i in ids],
                     "v": [float(i * ts) for i in ids]}, schema=SCHEMA)


def new_table(cluster: RpcCluster) -> str:
    name = f"t_{uuid.uuid4().hex[:8]}"
    cluster.client().create_table(name, SCHEMA, record_key="id", ordering_field="ts",
                                  partition_fields="city", buckets=4)
    return name


def model_of(*batches: pa.Table) -> pa.Table:
    """The latest row per key (highest ts; the later write on a tie)."""
    latest: dict[int, dict[str, Any]] = {}
    for batch in batches:
        for row in batch.to_pylist():
            if row["id"] not in latest or row["ts"] >= latest[row["id"]]["ts"]:
                latest[row["id"]] = row
    return pa.Table.from_pylist(sorted(latest.values(), key=lambda r: r["id"]), schema=SCHEMA)


def spark_read(spark: Any, table: str, where: str | None = None, **options: str) -> pa.Table:
    reader = spark.read.format("memtier").option("table", table)
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load()
    if where:
        df = df.where(where)
    return df.toArrow().sort_by("id")


def test_batch_read_equals_client_read_and_model_in_files_memory_and_wal(
    cluster: RpcCluster, spark: Any
) -> None:
    client = cluster.client()
    table = new_table(cluster)
    flushed = rows(range(0, 300), 1)
    client.write(table, flushed)
    client.flush(table)
    evicted = rows(range(200, 400), 2)  # updates of flushed keys and new ones, WAL only
    client.write(table, evicted)
    for server in cluster.servers.values():
        server.evict()
    held = rows(range(350, 450), 3)  # in memory
    client.write(table, held)
    with client.transaction(table) as tx:  # a committed transaction, and an open one
        tx.write(rows(range(440, 460), 4))
    open_tx = Transaction(client, table, "left-open")
    open_tx.write(rows(range(0, 10), 9))
    committed = model_of(flushed, evicted, held, rows(range(440, 460), 4))
    latest = model_of(committed, rows(range(0, 10), 9))
    wheres = [None, "city = 'ams'", "id IN (5, 250, 445, 999)", "v > 500.0 AND city <> 'lis'", "id = 7"]
    for pushdown in ("true", "false"):
        for mode, model in (("latest", latest), ("committed", committed)):
            for where in wheres:
                got = spark_read(spark, table, where, mode=mode, pushdown=pushdown)
                expected = client.read(table, mode).sort_by("id")
                if where:
                    expected = pa.Table.from_pandas(
                        expected.to_pandas().query(where.replace("<>", "!=").replace(" IN ", " in ")
                                                   .replace("AND", "and").replace(" = ", " == ")),
                        schema=SCHEMA, preserve_index=False,
                    )
                    model = model_of(model).to_pandas().query(
                        where.replace("<>", "!=").replace(" IN ", " in ").replace("AND", "and")
                        .replace(" = ", " == "))
                    model = pa.Table.from_pandas(model, schema=SCHEMA, preserve_index=False)
                assert got.equals(expected), (mode, where, pushdown)
                assert got.equals(model), (mode, where, pushdown)
                model = latest if mode == "latest" else committed
    read_optimized = spark_read(spark, table, mode="read_optimized")
    assert read_optimized.equals(client.read(table, "read_optimized").sort_by("id"))
    instant = client.master.latest_commit(table)
    assert spark_read(spark, table, as_of=instant).equals(client.read(table, as_of=instant).sort_by("id"))
    since = "0" * 17  # every commit: the rows flushed so far, as an incremental read sees them
    incremental = spark_read(spark, table, mode="incremental", start=since)
    assert incremental.equals(client.read(table, "incremental", start=since).sort_by("id"))
    assert incremental.equals(flushed)
    open_tx.abort()


def test_each_bucket_is_its_own_spark_task_and_key_equalities_prune_them(cluster: RpcCluster, spark: Any) -> None:
    client = cluster.client()
    table = new_table(cluster)
    client.write(table, rows(range(100), 1))
    df = spark.read.format("memtier").option("table", table).load()
    assert df.rdd.getNumPartitions() == 4
    assert df.where("id = 3").rdd.getNumPartitions() == 1


def test_sql_view_and_bad_options(cluster: RpcCluster, spark: Any) -> None:
    client = cluster.client()
    table = new_table(cluster)
    client.write(table, rows(range(20), 1))
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW v_{table} USING memtier OPTIONS (table '{table}')")
    assert spark.sql(f"SELECT count(*) AS n FROM v_{table} WHERE city = 'ber'").collect()[0].n == 7
    bad = [
        ({}, 'needs the option "table"'),
        ({"table": table, "colour": "red"}, "unknown option"),
        ({"table": "no_such_table"}, "no_such_table"),
        ({"table": table, "mode": "newest"}, "mode must be one of"),
        ({"table": table, "mode": "incremental"}, "needs start"),
    ]
    for options, message in bad:
        reader = spark.read.format("memtier")
        for key, value in options.items():
            reader = reader.option(key, value)
        with pytest.raises(Exception, match=message):
            reader.load().collect()


def _write_input(folder: Path, name: str, batch: pa.Table) -> None:
    folder.mkdir(exist_ok=True)
    pq.write_table(batch, folder / f"{name}.parquet.tmp")
    (folder / f"{name}.parquet.tmp").rename(folder / f"{name}.parquet")


def _run_sink(spark: Any, table: str, source: Path, checkpoint: Path, fail_marker: Path | None = None) -> None:
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.types import LongType, StructType

    from memtier.spark.types import spark_schema

    df = spark.readStream.schema(spark_schema(SCHEMA)).option("maxFilesPerTrigger", 1).parquet(str(source))
    if fail_marker is not None:
        marker = str(fail_marker)

        def fail_if_marked(value: int) -> int:
            import os

            if os.path.exists(marker) and value % 2 == 1:
                raise RuntimeError("injected task failure")
            return value

        df = df.withColumn("id", F.udf(fail_if_marked, LongType())("id"))
    assert isinstance(df.schema, StructType)
    query = (df.writeStream.format("memtier").option("table", table)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()


def test_stream_sink_failed_and_replayed_batches_land_exactly_once(
    cluster: RpcCluster, spark: Any, tmp_path: Path
) -> None:
    client = cluster.client()
    table = new_table(cluster)
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    inputs = [rows(range(0, 100), 1), rows(range(100, 200), 1)]
    for i, batch in enumerate(inputs):
        _write_input(source, f"part-{i}", batch)
    _run_sink(spark, table, source, checkpoint)
    assert client.read(table, "committed").sort_by("id").equals(model_of(*inputs))

    inputs.append(rows(range(50, 250), 2))  # updates and new keys; its first try fails mid-batch
    _write_input(source, "part-2", inputs[-1])
    marker = tmp_path / "fail"
    marker.touch()
    with pytest.raises(Exception, match="injected task failure"):
        _run_sink(spark, table, source, checkpoint, fail_marker=marker)
    assert client.read(table, "committed").sort_by("id").equals(model_of(*inputs[:2]))
    marker.unlink()
    _run_sink(spark, table, source, checkpoint)  # Spark replays the failed batch
    assert client.read(table, "committed").sort_by("id").equals(model_of(*inputs))

    for name in ("2", ".2.crc"):  # Spark forgets it committed batch 2: it replays it
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    client.write(table, rows(range(60, 70), 5))  # newer rows the replay must not overwrite
    _run_sink(spark, table, source, checkpoint)
    expected = model_of(*inputs, rows(range(60, 70), 5))
    assert client.read(table, "latest").sort_by("id").equals(expected)
    client.flush(table)
    path = client.describe(table)["path"]
    assert hudi_rs_read(path).select(SCHEMA.names).sort_by("id").equals(expected)


def test_stream_sink_deletes_rows_flagged_by_hoodie_is_deleted_and_rejects_unknown_columns(
    cluster: RpcCluster, spark: Any, tmp_path: Path
) -> None:
    client = cluster.client()
    table = new_table(cluster)
    source = tmp_path / "in"
    first = rows(range(0, 50), 1)
    flagged = pa.Table.from_pylist(
        [{**r, "_hoodie_is_deleted": r["id"] < 10} for r in rows(range(0, 20), 2).to_pylist()])
    _write_input(source, "part-0", first.append_column("_hoodie_is_deleted", pa.array([False] * 50)))
    _write_input(source, "part-1", flagged)
    df = spark.readStream.schema(spark.read.parquet(str(source)).schema).option(
        "maxFilesPerTrigger", 1).parquet(str(source))
    df.writeStream.format("memtier").option("table", table).option(
        "checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start().awaitTermination()
    kept = model_of(first, rows(range(10, 20), 2))
    assert client.read(table, "committed").sort_by("id").equals(
        kept.filter(pa.compute.greater_equal(kept["id"], 10)))

    client.alter_table(table, options={"schema.evolution": "off"})  # (auto: a new column evolves the table)
    writer = spark.readStream.format("rate").load().selectExpr(
        "value AS id", "value AS ts", "'ams' AS city", "1.0D AS v", "'red' AS colour").writeStream.format(
        "memtier").option("table", table).option("checkpointLocation", str(tmp_path / "c2"))
    with pytest.raises(Exception, match="colour"):
        query = writer.start()
        try:
            query.awaitTermination(120)
        finally:
            query.stop()
    assert client.describe(table)["schema_version"] == 0


def _consume(spark: Any, table: str, checkpoint: Path, out: Path, starting: str = "earliest") -> None:
    def keep(batch: Any, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(str(out / f"batch-{batch_id}"))

    query = (spark.readStream.format("memtier").option("table", table).option("starting", starting).load()
             .writeStream.foreachBatch(keep).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()


def _consumed(out: Path) -> pa.Table:
    parts = [pq.read_table(p) for p in sorted(out.glob("batch-*"))]
    return pa.concat_tables([p.select(SCHEMA.names).cast(SCHEMA) for p in parts]).sort_by("id")


def test_change_feed_restarted_consumer_misses_and_repeats_nothing(
    cluster: RpcCluster, spark: Any, tmp_path: Path
) -> None:
    client = cluster.client()
    table = new_table(cluster)
    first, second = rows(range(0, 100), 1), rows(range(100, 160), 1)
    client.write(table, first)
    client.flush(table)
    checkpoint, out = tmp_path / "ckpt", tmp_path / "out"
    _consume(spark, table, checkpoint, out)
    assert _consumed(out).equals(first)
    client.write(table, second)
    client.flush(table)
    client.write(table, rows(range(500, 510), 1))  # acknowledged, not flushed: not a change yet
    _consume(spark, table, checkpoint, out)  # restarted from its checkpoint
    assert _consumed(out).equals(model_of(first, second))
    late = tmp_path / "late"
    _consume(spark, table, tmp_path / "ckpt2", late, starting="latest")
    assert sum(pq.read_table(p).num_rows for p in late.glob("batch-*")) == 0
    client.flush(table)  # the acknowledged rows become a change: only they reach the late consumer
    _consume(spark, table, tmp_path / "ckpt2", late, starting="latest")
    assert _consumed(late).equals(rows(range(500, 510), 1))


def test_backfill_writes_files_directly_and_merges_by_ordering_value(
    cluster: RpcCluster, spark: Any
) -> None:
    client = cluster.client()
    table = new_table(cluster)
    streamed = rows(range(0, 100), 5)
    client.write(table, streamed)
    client.flush(table)
    old_and_new = pa.concat_tables([rows(range(0, 50), 1), rows(range(100, 300), 3)])  # ts 1 < 5: loses
    spark.createDataFrame(old_and_new.to_pandas()).repartition(3).write.format("memtier").option(
        "table", table).mode("append").save()
    expected = model_of(streamed, old_and_new)
    assert client.read(table).sort_by("id").equals(expected)
    path = client.describe(table)["path"]
    assert hudi_rs_read(path).select(SCHEMA.names).sort_by("id").equals(expected)
    deletes = pa.table({"id": pa.array(range(0, 20), pa.int64()), "city": [CITIES[i % 3] for i in range(20)]})
    spark.createDataFrame(deletes.to_pandas()).write.format("memtier").option("table", table).option(
        "operation", "delete").mode("append").save()
    remaining = expected.filter(pa.compute.greater_equal(expected["id"], 20))
    assert client.read(table).sort_by("id").equals(remaining)
    with pytest.raises(Exception, match=r"lacks columns \['ts', 'city'\]"):  # refused before it evolves anything
        spark.createDataFrame([(1, 2)], "id long, colour long").write.format("memtier").option(
            "table", table).mode("append").save()
    assert client.describe(table)["schema_version"] == 0
    assert client.read(table).sort_by("id").equals(remaining)


def test_backfill_and_a_flush_into_the_same_file_groups_both_commit(cluster: RpcCluster) -> None:
    """The write and commit steps of a backfill, run here as Spark runs them, with a
    table-server flush into the same file groups committed in between: both land, merged
    by ordering value (the flush's ts 2 loses to the backfill's 7 on every key)."""
    from memtier.spark.backfill import Backfill
    from memtier.spark.options import BACKFILL, SourceOptions

    client = cluster.client()
    table = new_table(cluster)
    client.write(table, rows(range(0, 40), 1))
    client.flush(table)
    options = SourceOptions.parse({"table": table, "address": cluster.address}, BACKFILL, "batch write")
    backfill = Backfill(options, SCHEMA)
    message = backfill.write(iter(rows(range(0, 40), 7).to_batches()))
    client.write(table, rows(range(20, 60), 2))
    client.flush(table)  # a streaming flush into the same file groups
    backfill.commit([message])
    backfill.abort([message])  # (were Spark to call it now: nothing to undo, no error)
    expected = model_of(rows(range(0, 40), 1), rows(range(20, 60), 2), rows(range(0, 40), 7))
    path = client.describe(table)["path"]
    assert client.read(table).sort_by("id").equals(expected)
    assert hudi_rs_read(path).select(SCHEMA.names).sort_by("id").equals(expected)


def test_change_feed_under_a_processing_time_trigger_picks_up_new_commits(
    cluster: RpcCluster, spark: Any, tmp_path: Path
) -> None:
    import time

    client = cluster.client()
    table = new_table(cluster)
    out = tmp_path / "out"

    def keep(batch: Any, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(str(out / f"batch-{batch_id}"))

    query = (spark.readStream.format("memtier").option("table", table).load().writeStream.foreachBatch(keep)
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="1 second").start())
    try:
        written = []
        for step in range(3):  # commits while the query runs
            batch = rows(range(step * 10, step * 10 + 10), 1)
            client.write(table, batch)
            client.flush(table)
            written.append(batch)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            consumed = [pq.read_table(p) for p in out.glob("batch-*")] if out.exists() else []
            if sum(t.num_rows for t in consumed) >= 30:
                break
            time.sleep(1)
    finally:
        query.stop()
    assert _consumed(out).equals(model_of(*written))


def test_change_feed_waits_for_a_pending_backfill_then_has_its_rows(
    cluster: RpcCluster, spark: Any, tmp_path: Path
) -> None:
    """A backfill completes under its instant, earlier than the flushes that completed
    while it ran: the feed goes no further than the instants before it until it completes,
    so no consumer moves past its rows."""
    from memtier.spark.backfill import Backfill
    from memtier.spark.options import BACKFILL, SourceOptions

    client = cluster.client()
    table = new_table(cluster)
    first = rows(range(0, 20), 1)
    client.write(table, first)
    client.flush(table)
    backfill = Backfill(SourceOptions.parse({"table": table, "address": cluster.address}, BACKFILL, "batch write"),
                        SCHEMA)
    message = backfill.write(iter(rows(range(100, 120), 1).to_batches()))
    later = rows(range(20, 40), 1)
    client.write(table, later)
    client.flush(table)  # completes while the backfill is pending, under a later instant
    out = tmp_path / "out"
    _consume(spark, table, tmp_path / "ckpt", out)
    assert _consumed(out).equals(first)  # not past the pending backfill
    backfill.commit([message])
    _consume(spark, table, tmp_path / "ckpt", out)
    assert _consumed(out).equals(model_of(first, later, rows(range(100, 120), 1)))
