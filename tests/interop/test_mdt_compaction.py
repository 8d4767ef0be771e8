"""memtier compacts Hudi's metadata table as Hudi does, and Hudi takes the result: on a
merge-on-read bucket-index table Hudi 1.0.2 (version 8) or 1.1.1 (version 9) created with
its metadata table, the tier's flushes, a compaction and a clean (which deletes files) run past
``hoodie.metadata.compact.max.delta.commits`` (10), the master's table-service check
compacts the metadata table's ``files`` partition (a base HFile of memtier's, fewer log
files than commits in the latest slice), and Hudi on Spark (metadata table on) reads the
model, lists through the metadata table exactly the files the file system holds
(``validate_metadata_table_files``), and upserts on from it; hudi-rs and memtier read the
model too. (No row deletes: Hudi 1.0.2's reader fails on a key deleted then upserted in
one file group's logs, docs/interoperability.md.)"""

from __future__ import annotations

import random

import pytest

from memtier.hudi import HudiTable
from memtier.hudi.filenames import BaseFile
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.mdt import metadata_table_path
from memtier.hudi.mdtcompact import read_files_partition
from memtier.hudi.timeline import Timeline
from tests.interop.test_adopt import BUCKETS, KEYS, data, expected, make_row, run_pool, spark, to_arrow
from tests.support.hudi_spark import (
    KEEP_LOGS,
    HudiSpark,
    assert_metadata_table_current,
    listed_files,
    writer_options,
)
from tests.support.hudirs import hudi_rs_read
from tests.support.inprocess import InProcessCluster
from tests.support.model import TableModel

pytestmark = [pytest.mark.slow, pytest.mark.spark]

FLUSHES = 14
__all__ = ["spark"]  # the Hudi 1.0.2 and 1.1.1 sessions of test_adopt, one per module


def options() -> dict[str, str]:
    return writer_options("mdtc", "id", "version", "region", buckets=BUCKETS, **KEEP_LOGS,
                          **{"hoodie.metadata.enable": "true", "hoodie.metadata.index.column.stats.enable": "false",
                             "hoodie.metadata.index.partition.stats.enable": "false"})


def test_hudi_takes_the_metadata_table_memtier_compacted(spark: HudiSpark, tmp_path) -> None:
    path = str(tmp_path / "mdtc")
    rng = random.Random(11)
    model = TableModel(("id",), "version", ("region",), buckets=BUCKETS)
    first = [make_row(rng, k, 1) for k in range(KEYS)]
    spark.write(path, to_arrow(first), options())
    model.upsert(1, first)
    HudiTable.open(path).set_bucket_index(BUCKETS)  # Hudi's writer does not record it in the table

    cluster = InProcessCluster(str(tmp_path / "cluster"),
                               services={"services.check-interval": "1ms", "services.compaction-log-files": "1000"})
    commits = 0
    try:
        cluster.add_server("ts-0")
        client = cluster.client()
        client.register_table("t", path)
        cluster.master.set_services("t", {"services.clean-retain-versions": "1"})
        for number in range(2, 2 + FLUSHES):
            rows = [make_row(rng, k, number) for k in rng.sample(range(KEYS + 10), 8)]
            client.write("t", to_arrow(rows))
            model.upsert(number, rows)
            assert client.flush("t")
            commits += 1
            if number == 8:  # a compaction and a clean (which deletes files) on the way
                cluster.run_service("t", "compaction")
                model.compact()
                cluster.run_service("t", "clean")
                run_pool(cluster)
                commits += 2
            cluster.master.check_services()
        assert data(client.read("t")) == expected(model)
    finally:
        cluster.close()

    table = HudiTable.open(path)
    mdt = metadata_table_path(path)
    mdt_timeline = Timeline.load(table.io, mdt, 2)
    ours = [i.timestamp for i in mdt_timeline.completed(("commit",))
            if table.io.exists(f"{mdt}/files/{BaseFile('files-0000-0', '0-0-0', i.timestamp, 'hfile').name}")]
    assert ours, "memtier never compacted the metadata table"
    latest = FileSystemView.build(table.io, mdt, mdt_timeline, partition_filter=lambda p: p == "files").latest_slice(
        "files", "files-0000-0")
    assert latest is not None and latest.base_file is not None and latest.base_file.instant == ours[-1]
    assert len(latest.log_files) < commits
    listing = read_files_partition(table.io, path, table.timeline())
    assert {(p, n, s) for p, names in listing.items() for n, s in names.items()} == listed_files(path)

    assert data(spark.read(path)) == expected(model)
    assert_metadata_table_current(spark, path)
    assert data(hudi_rs_read(path)) == expected(model)
    assert data(table.read()) == expected(model)

    again = [make_row(rng, k, 99) for k in rng.sample(range(KEYS), 8)]
    spark.write(path, to_arrow(again), options())  # Hudi goes on from memtier's base file
    model.upsert(99, again)
    assert data(spark.read(path)) == expected(model)
    assert_metadata_table_current(spark, path)
    assert data(HudiTable.open(path).read()) == expected(model)
