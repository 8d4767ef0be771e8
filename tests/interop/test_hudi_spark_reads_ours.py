"""Interop out, the reference reader: Apache Hudi on Spark (``spark.read.format("hudi")``,
Hudi 1.0 on Spark 3.5) reads the tables memtier writes with the rows memtier reads and a
model predicts: snapshot, time travel and read-optimized queries, Avro and
Parquet log blocks, partitioned and not, copy-on-write, and merge-on-read tables before
and after memtier's compaction and clustering.

Histories are random (seeded) upserts, late records that must lose, and deletes."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field

import pyarrow as pa
import pytest

from memtier.compaction.worker import ServiceWorker
from memtier.hudi import HudiTable, filegroup
from tests.interop.test_hudi_rs_reads_ours import DATA_COLUMNS, SCHEMA, comparable, make_row, to_arrow
from tests.support.hudi_spark import HudiSpark
from tests.support.hudirs import rows
from tests.support.inprocess import InProcessCluster
from tests.support.model import TableModel

pytestmark = [pytest.mark.slow, pytest.mark.spark]

#: name -> (table type, log block format, record key, partition fields)
LAYOUTS = {
    "mor-avro-complexkey": ("MERGE_ON_READ", "avro", ["id", "name"], ["region"]),
    "mor-parquet": ("MERGE_ON_READ", "parquet", ["id"], ["region"]),
    "mor-avro-nonpartitioned": ("MERGE_ON_READ", "avro", ["id"], []),
    "cow": ("COPY_ON_WRITE", "avro", ["id"], ["region"]),
}
KEYS = 80
MAP = DATA_COLUMNS.index("attrs")


def unordered_maps(tuples: list[tuple]) -> list[tuple]:
    """Rows with each map's entries sorted: Java Hudi reads Avro log maps into hash maps,
    so a map's entries come back in another order (a map has none)."""
    def fix(t: tuple) -> tuple:
        return t[:MAP] + (None if t[MAP] is None else sorted(t[MAP]),) + t[MAP + 1:]
    return sorted((fix(t) for t in tuples), key=lambda t: tuple(repr(v) for v in t))


def data(table: pa.Table) -> list[tuple]:
    return unordered_maps(rows(table, DATA_COLUMNS))


def expected(model: TableModel, start: int | None = None, end: int | None = None) -> list[tuple]:
    """The model's rows (``changed_since(start, end)`` with a range), maps sorted."""
    live = model.rows() if start is None else model.changed_since(start, end)
    return unordered_maps(comparable(live))


@dataclass
class Written:
    """A memtier-written table, its instants and the model after each of them."""

    path: str
    table: HudiTable
    model: TableModel
    instants: list[str] = field(default_factory=list)
    models: list[TableModel] = field(default_factory=list)

    def commit(self, kind: str, batch: list[dict]) -> None:
        if kind == "delete":
            instant = self.table.write(to_arrow(batch), operation="delete")
            self.model.delete(len(self.instants) + 1, batch)
        else:
            instant = self.table.write(to_arrow(batch))
            self.model.upsert(len(self.instants) + 1, batch)
        assert instant is not None
        self.instants.append(instant)
        self.models.append(copy.deepcopy(self.model))


def random_history(written: Written, rng: random.Random, commits: int, reinsert: bool = False) -> None:
    """A first insert of every key, then random upserts (some late: ordering 0) and
    deletes. Unless ``reinsert``, a deleted key is never written again (see
    :func:`test_reinserted_keys`)."""
    version = 1
    written.commit("upsert", [make_row(rng, k, version) for k in range(KEYS)])
    retired: set[int] = set()
    for _ in range(commits - 1):
        keys = [k for k in rng.sample(range(KEYS + 20), rng.randrange(5, 40)) if k not in retired]
        if rng.random() < 0.3:
            written.commit("delete", [make_row(rng, k, 0) for k in keys])
            retired.update(() if reinsert else keys)
            continue
        version += 1
        written.commit("upsert", [make_row(rng, k, rng.choice([version, version, 0])) for k in keys])


def write_table(tmp_path, layout: str, seed: int, commits: int = 5) -> Written:
    table_type, block_format, key, partitions = LAYOUTS[layout]
    path = str(tmp_path / layout)
    table = HudiTable.create(path, SCHEMA, record_key=key, ordering_field="version",
                             partition_fields=partitions, buckets=3, table_type=table_type,
                             log_block_format=block_format)
    model = TableModel(tuple(key), "version", tuple(partitions), buckets=3,
                       copy_on_write=table_type == "COPY_ON_WRITE")
    written = Written(path, table, model)
    random_history(written, random.Random(seed), commits)
    return written


def run_service(cluster: InProcessCluster, kind: str, **options) -> None:
    """Plan a table service on the master and run it to completion in this process."""
    assert cluster.master.schedule_service("t", kind, **options) is not None, kind
    done = ServiceWorker("svc", cluster.master).run_once()
    assert done["state"] == "completed", done


@pytest.fixture(scope="module", params=list(LAYOUTS))
def written(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Written:
    mp = pytest.MonkeyPatch()
    mp.setattr(filegroup, "LOG_BLOCK_ROWS", 7)  # several data blocks per log file
    try:
        return write_table(tmp_path_factory.mktemp("spark-reads"), request.param, seed=len(request.param))
    finally:
        mp.undo()


def test_snapshot_and_time_travel(hudi_spark: HudiSpark, written: Written) -> None:
    assert data(written.table.read()) == expected(written.model)
    assert data(hudi_spark.read(written.path)) == expected(written.model)
    middle = len(written.instants) // 2
    as_of = expected(written.models[middle])
    assert data(written.table.read(as_of=written.instants[middle])) == as_of
    assert data(hudi_spark.read(written.path, as_of=written.instants[middle])) == as_of


def test_read_optimized(hudi_spark: HudiSpark, written: Written) -> None:
    ours = data(written.table.read(mode="read_optimized"))
    assert data(hudi_spark.read(written.path, "read_optimized")) == ours


def test_meta_columns(hudi_spark: HudiSpark, written: Written) -> None:
    """The record key, partition path and commit time Hudi reads from memtier's meta
    columns are the ones memtier reads."""
    columns = ["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_commit_time"]
    ours = written.table.read(include_meta=True)
    assert rows(hudi_spark.read(written.path), columns) == rows(ours, columns)


@pytest.mark.parametrize("layout", [name for name, spec in LAYOUTS.items() if spec[0] == "MERGE_ON_READ"])
def test_after_compaction_and_clustering(hudi_spark: HudiSpark, tmp_path, layout: str) -> None:
    """memtier's compaction (log files into new base files, a Hudi ``commit``) and
    clustering (a ``replacecommit``), with tier writes between them: Hudi's snapshot
    equals memtier's and the model's, and its read-optimized view holds every row right
    after each."""
    written = write_table(tmp_path, layout, seed=3 * len(layout))
    cluster = InProcessCluster(str(tmp_path / "cluster"))
    try:
        cluster.add_server("ts-0")
        client = cluster.client()
        client.register_table("t", written.path)
        run_service(cluster, "compaction")
        assert data(hudi_spark.read(written.path)) == expected(written.model)
        assert data(hudi_spark.read(written.path, "read_optimized")) == expected(written.model)

        rng = random.Random(len(layout))
        late = [make_row(rng, k, 9) for k in rng.sample(range(KEYS), 10)]
        client.write("t", to_arrow(late))  # log files on top of the compacted slices
        client.flush("t")
        written.model.upsert(len(written.instants) + 1, late)
        assert data(client.read("t")) == expected(written.model)
        assert data(hudi_spark.read(written.path)) == expected(written.model)

        run_service(cluster, "clustering", sort_columns=["version"])
        assert data(client.read("t")) == expected(written.model)
        assert data(hudi_spark.read(written.path)) == expected(written.model)
        assert data(hudi_spark.read(written.path, "read_optimized")) == expected(written.model)
    finally:
        cluster.close()
