"""Adoption: a partitioned merge-on-read table Apache Hudi 1.x wrote with its defaults
(simple index, metadata table on: table version 8 with Hudi 1.0.2, 9 with 1.1.1) is
registered with ``buckets=N``: its metadata table keeps its ``files`` partition (column
and partition stats dropped as Hudi drops a disabled index), its file groups converted
into N per partition by a clustering of the table-service pool (writes refused meanwhile,
reads equal throughout), then random upserts and deletes stream through the tier, flush,
compact and clean; after each step Hudi's own view of its metadata table
(``validate_metadata_table_files``) equals the file system's listing, and Hudi on Spark
(metadata table on for reads, its default) reads the model (snapshot; incremental, of one
flush; read-optimized after the compaction), and so does hudi-rs; then Hudi upserts again with the bucket index
memtier recorded (its metadata table on) and both read the model. Refusals name what to do."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pyarrow as pa
import pytest

from memtier.client import Client
from memtier.compaction.worker import ServiceWorker
from memtier.errors import TableConvertingError, UnsupportedTableError
from memtier.hudi import HudiTable
from memtier.hudi.adopt import fits_buckets
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.mdt import has_metadata_table, metadata_table_path
from memtier.hudi.properties import METADATA_PARTITIONS, load_table_config
from memtier.hudi.timeline import Timeline
from tests.support.hudi_spark import (
    HUDI_VERSIONS,
    HudiSpark,
    assert_metadata_table_current,
    listed_files,
    writer_options,
)
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.inprocess import InProcessCluster
from tests.support.model import TableModel, project

pytestmark = [pytest.mark.slow, pytest.mark.spark]

KEYS = 40
BUCKETS = 2
#: No nulls: Hudi 1.0.2's column stats (on by default) fail on a null in a log write
#: (NullPointerException "fieldValue is null" in collectColumnRangeMetadata).
SCHEMA = pa.schema([("id", pa.int64()), ("version", pa.int64()), ("region", pa.string()), ("v", pa.string())])
COLUMNS = SCHEMA.names


def make_row(rng: random.Random, key: int, version: int) -> dict:
    return {"id": key, "version": version, "region": ("eu", "us", "apac")[key % 3], "v": f"v{rng.randrange(1000)}"}


def to_arrow(batch: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(batch, schema=SCHEMA)


def data(table: pa.Table) -> list[tuple]:
    return rows(table, COLUMNS)


def expected(model: TableModel) -> list[tuple]:
    return project(model.rows(), COLUMNS)


@pytest.fixture(scope="module", params=["1.0.2", "1.1.1"])
def spark(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HudiSpark]:
    with HudiSpark(tmp_path_factory.mktemp("spark"), version=request.param) as session:
        yield session


def run_pool(cluster: InProcessCluster) -> None:
    """Run the table-service tasks queued, in this process, as the pool's actor would."""
    while (task := ServiceWorker("pool", cluster.master).run_once()) is not None:
        assert task["state"] == "completed", task


def hudi_defaults(spark: HudiSpark, path: str, model: TableModel, rng: random.Random) -> dict[str, str]:
    """Three commits with Hudi's default options (its default index, metadata table on):
    inserts, upserts, deletes. Returns the options."""
    options = writer_options("adopted", "id", "version", "region")
    first = [make_row(rng, k, 1) for k in range(KEYS)]
    spark.write(path, to_arrow(first), options)
    model.upsert(1, first)
    second = [make_row(rng, k, 2) for k in rng.sample(range(KEYS + 10), 15)]
    spark.write(path, to_arrow(second), options)
    model.upsert(2, second)
    gone = [make_row(rng, k, 0) for k in rng.sample(range(KEYS), 5)]
    spark.write(path, to_arrow(gone), {**options, "hoodie.datasource.write.operation": "delete"})
    model.delete(3, gone)
    return options


def assert_incremental_read_of_one_flush(spark: HudiSpark, client: Client, path: str, flushed: list[dict]) -> None:
    """Upserts of distinct keys at a newer version, flushed as one commit: an incremental
    query from the commit before to it returns exactly them, in Hudi 1.1+ on Spark
    (metadata table on), hudi-rs and memtier's own reader. The range runs from the completion time
    of the commit before to that of the flush: the same commits whether a reader takes
    the bounds as instant times (table version 6) or completion times (Hudi 1.x)."""
    before = HudiTable.open(path).timeline().last_completed()
    client.write("t", to_arrow(flushed))
    assert client.flush("t")
    after = HudiTable.open(path).timeline().last_completed()
    assert before is not None and after is not None and after != before
    start, end = before.completion_time or before.timestamp, after.completion_time or after.timestamp
    want = data(to_arrow(flushed))
    if spark.versions["hudi"] != "1.0.2":  # 1.0.2 is not compared: docs/limits.md
        assert data(spark.read(path, "incremental", start=start, end=end)) == want
    assert data(hudi_rs_read(path, "incremental", start=start, end=end)) == want
    assert data(HudiTable.open(path).read(mode="incremental", start=start, end=end)) == want


def test_adopt_a_table_hudi_wrote_with_its_defaults(spark: HudiSpark, tmp_path) -> None:
    path = str(tmp_path / "adopted")
    rng = random.Random(3)
    model = TableModel(("id",), "version", ("region",), buckets=BUCKETS)
    options = hudi_defaults(spark, path, model, rng)
    table = HudiTable.open(path)
    assert table.config.version == HUDI_VERSIONS[spark.versions["hudi"]] and has_metadata_table(table.meta)
    assert data(table.read()) == expected(model)

    cluster = InProcessCluster(str(tmp_path / "cluster"))
    try:
        cluster.add_server("ts-0")
        client = cluster.client()
        client.register_table("readonly", path)  # without buckets: served for reads only
        assert data(client.read("readonly")) == expected(model)
        with pytest.raises(UnsupportedTableError, match="buckets=N"):
            client.write("readonly", to_arrow([make_row(rng, 1, 5)]))
        client.drop_table("readonly")
        described = client.register_table("t", path, buckets=BUCKETS)
        assert described["conversion"] is not None and described["buckets"] == BUCKETS
        adopted = HudiTable.open(path)
        assert has_metadata_table(adopted.meta)
        assert load_table_config(adopted.io, path).raw[METADATA_PARTITIONS] == "files"
        assert not adopted.io.exists(f"{metadata_table_path(path)}/column_stats")
        with pytest.raises(TableConvertingError, match="being converted"):
            client.write("t", to_arrow([make_row(rng, 1, 5)]))
        assert data(client.read("t")) == expected(model)  # readable while it converts
        run_pool(cluster)
        table = HudiTable.open(path)
        assert fits_buckets(FileSystemView.build(table.io, path, table.timeline()), BUCKETS)
        assert "replacecommit" in {i.action for i in table.timeline().completed()}
        assert data(spark.read(path)) == expected(model)
        assert_metadata_table_current(spark, path)

        commit = 3
        for _ in range(3):
            commit += 1
            rows = [make_row(rng, k, commit) for k in rng.sample(range(KEYS + 10), 12)]
            client.write("t", to_arrow(rows))
            model.upsert(commit, rows)
            commit += 1
            gone = [make_row(rng, k, 0) for k in rng.sample(range(KEYS + 10), 3)]
            client.delete("t", to_arrow(gone).select(["id", "region"]))
            model.delete(commit, gone)
            assert client.flush("t")
        assert data(client.read("t")) == expected(model)
        assert data(spark.read(path)) == expected(model)
        assert data(hudi_rs_read(path)) == expected(model)
        assert_metadata_table_current(spark, path)
        commit += 1
        flushed = [make_row(rng, k, commit) for k in rng.sample(range(KEYS + 10), 10)]
        assert_incremental_read_of_one_flush(spark, client, path, flushed)
        model.upsert(commit, flushed)
        client.compact("t", wait=False)
        run_pool(cluster)
        model.compact()
        assert data(spark.read(path, "read_optimized")) == expected(model)
        cluster.master.set_services("t", {"services.clean-retain-versions": "1"})
        before = listed_files(path)
        client.clean("t", wait=False)
        run_pool(cluster)
        assert listed_files(path) < before  # the clean deleted files
        assert_metadata_table_current(spark, path)
        assert data(spark.read(path)) == expected(model)
        assert HudiTable.open(path).config.version == HUDI_VERSIONS[spark.versions["hudi"]]
    finally:
        cluster.close()

    again = [make_row(rng, k, 99) for k in rng.sample(range(KEYS), 8)]
    bucketed = {**options, "hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": str(BUCKETS)}
    spark.write(path, to_arrow(again), bucketed)
    model.upsert(commit + 1, again)
    table = HudiTable.open(path)
    assert fits_buckets(FileSystemView.build(table.io, path, table.timeline()), BUCKETS)
    assert data(table.read()) == expected(model)
    assert data(spark.read(path)) == expected(model)
    assert_metadata_table_current(spark, path)
    # Hudi's writer compacted the metadata table's log, memtier's deltacommits included
    metadata_timeline = Timeline.load(table.io, metadata_table_path(path), 2)
    assert "commit" in {i.action for i in metadata_timeline.completed(None)}
