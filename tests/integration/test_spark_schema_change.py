"""A Structured Streaming query into ``format("memtier")`` whose input gains a nullable
column mid-stream, on a real Ray cluster and a real local SparkSession.

Spark's file source fixes a query's schema when the query starts, so a stream takes a new
column the way Spark streams take any schema change: the query is restarted from its
checkpoint with the input's new schema. Then, with ``schema.evolution=auto``, the sink
evolves the table as the query starts and every acknowledged row reads back (the new
column null for the rows before it), through memtier, hudi-rs and Apache Hudi on Spark,
after a flush and after compaction; with ``off``, the restarted query fails naming the
column, nothing acknowledged is lost, and once the table is altered the same checkpoint
lands the files it had left, exactly once. A batch write (a backfill) with the new column
evolves the table (``auto``, as Hudi's ``mergeSchema``) or is refused whole (``off``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.hudirs import hudi_rs_read

pytestmark = [pytest.mark.spark, pytest.mark.ray, pytest.mark.slow]
pytest.importorskip("pyspark")
pytest.importorskip("ray")

OLD = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.float64())])
NEW = OLD.append(pa.field("note", pa.string()))
CITIES = ("ams", "ber")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    import memtier

    running = memtier.start_local(str(tmp_path_factory.mktemp("memtier-spark-schema")), table_servers=1)
    yield running
    running.shutdown()


@pytest.fixture(scope="module")
def spark(cluster: Any) -> Iterator[Any]:
    import memtier.spark
    from tests.support.spark import local_session

    session = local_session()
    memtier.spark.register(session)  # the cluster start_local started in this process
    yield session
    session.stop()


def batch(ids: range, ts: int, schema: pa.Schema) -> pa.Table:
    data = {"id": list(ids), "ts": [ts] * len(ids), "city": [CITIES[i % 2] for i in ids],
            "v": [float(i * ts) for i in ids]}
    if "note" in schema.names:
        data["note"] = [f"n{i}" if i % 3 else None for i in ids]
    return pa.table(data, schema=schema)


def inputs() -> list[pa.Table]:
    """Two files as the producer first wrote them, then two with its new column: updates
    of keys the first ones wrote (a greater ts) and new keys."""
    return [batch(range(0, 100), 1, OLD), batch(range(100, 200), 1, OLD),
            batch(range(50, 150), 2, NEW), batch(range(200, 250), 2, NEW)]


def model(files: list[pa.Table], schema: pa.Schema = NEW) -> list[dict[str, Any]]:
    """The latest row per key, read as a table of ``schema`` has it."""
    latest: dict[int, dict[str, Any]] = {}
    for table in files:
        for row in table.to_pylist():
            latest[row["id"]] = {"note": None, **row}  # ts grows file by file
    return [{c: latest[k][c] for c in schema.names} for k in sorted(latest)]


def drop_file(folder: Path, name: str, table: pa.Table) -> None:
    folder.mkdir(exist_ok=True)
    pq.write_table(table, folder / f"{name}.tmp")
    (folder / f"{name}.tmp").rename(folder / name)  # the file source sees it whole


def stream(spark: Any, table: str, source: Path, checkpoint: Path) -> None:
    """One run of the query over what ``source`` holds (a micro-batch per file), with the
    schema the input has now (as ``mergeSchema`` infers it), from ``checkpoint``."""
    schema = spark.read.option("mergeSchema", "true").parquet(str(source)).schema
    query = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source))
             .writeStream.format("memtier").option("table", table)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()


def rows_of(table: pa.Table, schema: pa.Schema = NEW) -> list[dict[str, Any]]:
    return table.select(schema.names).sort_by("id").to_pylist()


def read(client: Any, table: str, mode: str = "latest", schema: pa.Schema = NEW) -> list[dict[str, Any]]:
    return rows_of(client.read(table, mode), schema)


def new_table(cluster: Any, evolution: str) -> str:
    name = f"t_{uuid.uuid4().hex[:8]}"
    cluster.client().create_table(name, OLD, record_key="id", ordering_field="ts", partition_fields="city",
                                  buckets=2, options={"schema.evolution": evolution})
    return name


def streamed_then_changed(cluster: Any, spark: Any, table: str, tmp_path: Path) -> tuple[Path, Path, list[pa.Table]]:
    """The query run over the producer's first two files, then the two with its new
    column dropped in: (source, checkpoint, every file)."""
    source, checkpoint, files = tmp_path / "in", tmp_path / "ckpt", inputs()
    for i in (0, 1):
        drop_file(source, f"part-{i}.parquet", files[i])
    stream(spark, table, source, checkpoint)
    assert cluster.client().describe(table)["schema_version"] == 0
    for i in (2, 3):  # the producer now sends its new column
        drop_file(source, f"part-{i}.parquet", files[i])
    return source, checkpoint, files


def test_with_evolution_auto_the_restarted_query_evolves_the_table_and_every_reader_follows(
    cluster: Any, spark: Any, tmp_path: Path
) -> None:
    from tests.support.hudi_spark import HudiSpark

    client = cluster.client()
    table = new_table(cluster, "auto")
    source, checkpoint, files = streamed_then_changed(cluster, spark, table, tmp_path)
    stream(spark, table, source, checkpoint)

    described = client.describe(table)
    assert pa.ipc.read_schema(pa.py_buffer(described["schema"])) == NEW
    assert described["schema_version"] == 1
    want = model(files)
    assert read(client, table) == want
    assert read(client, table, "committed") == want
    assert rows_of(spark.read.format("memtier").option("table", table).load().toArrow()) == want

    client.flush(table)
    path = described["path"]
    assert rows_of(hudi_rs_read(path)) == want
    with HudiSpark() as hudi:
        assert rows_of(hudi.read(path)) == want
        client.compact(table)
        assert read(client, table, "read_optimized") == want
        assert rows_of(hudi.read(path)) == want
        assert rows_of(hudi.read(path, "read_optimized")) == want
    assert rows_of(hudi_rs_read(path)) == want


def test_with_evolution_off_the_restarted_query_fails_naming_the_column_and_loses_nothing(
    cluster: Any, spark: Any, tmp_path: Path
) -> None:
    client = cluster.client()
    table = new_table(cluster, "off")
    source, checkpoint, files = streamed_then_changed(cluster, spark, table, tmp_path)
    with pytest.raises(Exception, match=r"schema.evolution=off.*added note string") as failed:
        stream(spark, table, source, checkpoint)
    assert table in str(failed.value)
    described = client.describe(table)
    assert described["schema_version"] == 0 and pa.ipc.read_schema(pa.py_buffer(described["schema"])) == OLD
    assert read(client, table, "committed", OLD) == model(files[:2], OLD)  # every acknowledged row, no more

    client.alter_table(table, options={"schema.evolution": "auto"})
    stream(spark, table, source, checkpoint)  # the same checkpoint: the files it had left, once
    assert client.describe(table)["schema_version"] == 1
    assert read(client, table, "committed") == model(files)



@pytest.mark.parametrize("evolution", ["auto", "off"])
def test_a_batch_write_with_a_new_column_evolves_the_table_or_is_refused_whole(
    cluster: Any, spark: Any, evolution: str
) -> None:
    """A backfill (``df.write.format("memtier")``) with a new column: ``auto`` evolves the
    table, as Hudi's ``mergeSchema``; ``off`` refuses it whole, naming the column."""
    client = cluster.client()
    table = new_table(cluster, evolution)
    first, newer = batch(range(0, 100), 1, OLD), batch(range(50, 150), 2, NEW)
    client.write(table, first)
    client.flush(table)
    write = spark.createDataFrame(newer.to_pandas()).repartition(2).write.format("memtier").option(
        "table", table).mode("append")
    if evolution == "auto":
        write.save()
        assert client.describe(table)["schema_version"] == 1
        assert read(client, table) == model([first, newer])
        assert rows_of(hudi_rs_read(client.describe(table)["path"])) == model([first, newer])
    else:
        with pytest.raises(Exception, match=r"schema.evolution=off.*added note string"):
            write.save()
        assert client.describe(table)["schema_version"] == 0
        assert read(client, table, schema=OLD) == model([first], OLD)
