"""Interop out, the reference reader: Apache Hudi on Spark (``spark.read.format("hudi")``,
Hudi 1.0 on Spark 3.5) reads the tables memtier writes with the rows memtier reads and a
model predicts: snapshot, time travel, read-optimized and incremental queries, Avro and
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
from tests.support.hudirs import hudi_rs_read, rows
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


def random_history(written: Written, rng: random.Random, commits: int, deletes: bool = True) -> None:
    """A first insert of every key, then random upserts (some late: ordering 0) and, with
    ``deletes``, deletes. A deleted key is never written again: Hudi 1.0.2's reader fails
    on that (tests/interop/test_hudi_spark_writes.py)."""
    version = 1
    written.commit("upsert", [make_row(rng, k, version) for k in range(KEYS)])
    retired: set[int] = set()
    for _ in range(commits - 1):
        keys = [k for k in rng.sample(range(KEYS + 20), rng.randrange(5, 40)) if k not in retired]
        if deletes and rng.random() < 0.3:
            written.commit("delete", [make_row(rng, k, 0) for k in keys])
            retired.update(keys)
            continue
        version += 1
        written.commit("upsert", [make_row(rng, k, rng.choice([version, version, 0])) for k in keys])


def write_table(tmp_path, layout: str, seed: int, commits: int = 5, deletes: bool = True) -> Written:
    table_type, block_format, key, partitions = LAYOUTS[layout]
    path = str(tmp_path / layout)
    table = HudiTable.create(path, SCHEMA, record_key=key, ordering_field="version",
                             partition_fields=partitions, buckets=3, table_type=table_type,
                             log_block_format=block_format)
    model = TableModel(tuple(key), "version", tuple(partitions), buckets=3,
                       copy_on_write=table_type == "COPY_ON_WRITE")
    written = Written(path, table, model)
    random_history(written, random.Random(seed), commits, deletes)
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
    """Also: the record key, partition path and commit time Hudi reads from memtier's meta
    columns are the ones memtier reads."""
    assert data(written.table.read()) == expected(written.model)
    theirs = hudi_spark.read(written.path)
    assert data(theirs) == expected(written.model)
    meta = ["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_commit_time"]
    assert rows(theirs, meta) == rows(written.table.read(include_meta=True), meta)
    middle = len(written.instants) // 2
    as_of = expected(written.models[middle])
    assert data(written.table.read(as_of=written.instants[middle])) == as_of
    assert data(hudi_spark.read(written.path, as_of=written.instants[middle])) == as_of


def test_read_optimized(hudi_spark: HudiSpark, written: Written) -> None:
    ours = data(written.table.read(mode="read_optimized"))
    assert data(hudi_spark.read(written.path, "read_optimized")) == ours


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_incremental(hudi_spark: HudiSpark, tmp_path, layout: str) -> None:
    """Upserts, some late. memtier returns the merged rows last written in (start, end].
    Hudi does too on copy-on-write tables; on merge-on-read tables it merges only the
    records written in the range, as hudi-rs does, so a late record that lost to an older
    version shows up (docs/interoperability.md). Deletes are left out: with them, Hudi
    1.0.2's incremental query of a merge-on-read table also returned rows deleted later in
    the range, which no model here describes."""
    written = write_table(tmp_path, layout, seed=7 * len(layout), deletes=False)
    last = len(written.instants) - 1
    differ = []
    for start, end in [(0, last), (1, last - 1)]:
        model = written.models[end]
        merged = expected(model, start + 1, end + 1)
        ours = written.table.read(mode="incremental", start=written.instants[start], end=written.instants[end])
        assert data(ours) == merged, (start, end)
        in_range = merged if model.copy_on_write else unordered_maps(
            comparable(model.hudi_rs_incremental(start + 1, end + 1)))
        theirs = hudi_spark.read(written.path, "incremental", start=written.instants[start],
                                 end=written.instants[end])
        assert data(theirs) == in_range, (start, end)
        differ.append(in_range != merged)
    assert any(differ) != written.model.copy_on_write  # the history shows the difference


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


@pytest.mark.parametrize("ordering", [pa.int32(), pa.string(), pa.float64()], ids=str)
def test_deletes_with_any_ordering_type(hudi_spark: HudiSpark, tmp_path, ordering: pa.DataType) -> None:
    """memtier's deletes in commit order carry Hudi's integer zero whatever the ordering
    field's type, as Hudi writes them: Hudi, memtier and hudi-rs all apply them (a zero of
    the field's own type made Hudi fail with a ClassCastException and was not applied by
    memtier or hudi-rs)."""
    schema = pa.schema([("id", pa.int64()), ("o", ordering), ("region", pa.string())])
    low, high = pa.array([1, 2]).cast(ordering).to_pylist()
    path = str(tmp_path / "t")
    table = HudiTable.create(path, schema, record_key="id", ordering_field="o", partition_fields="region", buckets=1)
    table.write(pa.Table.from_pylist([{"id": k, "o": low, "region": "eu"} for k in (1, 2, 3)], schema=schema))
    table.write(pa.Table.from_pylist([{"id": 2, "o": high, "region": "eu"}], schema=schema))
    table.write(pa.table({"id": pa.array([1, 2], pa.int64()), "region": ["eu", "eu"]}), operation="delete")
    expected_rows = [(3, low, "eu")]
    assert rows(table.read(), schema.names) == expected_rows
    assert rows(hudi_rs_read(path), schema.names) == expected_rows
    assert rows(hudi_spark.read(path), schema.names) == expected_rows


def ordered_history(client, model: TableModel, rng: random.Random, commits: int, first: int = 1) -> int:
    """Random upserts and ordered deletes (``client.delete`` with the ordering column)
    through the tier, one flush (commit) each, keys deleted and written again; ordering
    values drawn from a small range, so about half of each batch is late and many meet a
    version of equal ordering value (the later wins). Returns the next commit number."""
    key, partitions = list(model.key_fields), list(model.partition_fields)
    commit = first
    for number in range(commits):
        keys = range(KEYS) if number == 0 and first == 1 else rng.sample(range(KEYS + 20), rng.randrange(5, 40))
        batch = [make_row(rng, k, rng.randrange(1, 40)) for k in keys]
        if number and rng.random() < 0.4:
            client.delete("t", to_arrow(batch).select([*dict.fromkeys([*key, *partitions, "version"])]))
            model.delete(commit, batch, ordered=True)
        else:
            client.write("t", to_arrow(batch))
            model.upsert(commit, batch)
        assert client.flush("t")
        commit += 1
    return commit


@pytest.mark.parametrize("layout", [name for name, spec in LAYOUTS.items() if spec[0] == "MERGE_ON_READ"])
def test_ordered_deletes_through_the_tier(hudi_spark: HudiSpark, tmp_path, layout: str) -> None:
    """Deletes carrying their own ordering value, flushed as delete blocks in Hudi 1.0's
    layout (the ordering value in its union of wrapper records): Hudi's snapshot equals
    memtier's, hudi-rs's and the model's, before memtier's compaction, after it, and after
    more writes on top of it. Before, Hudi failed on these (ClassCastException)."""
    _, block_format, key, partitions = LAYOUTS[layout]
    path = str(tmp_path / "t")
    cluster = InProcessCluster(str(tmp_path / "cluster"))
    try:
        cluster.add_server("ts-0")
        client = cluster.client()
        client.create_table("t", SCHEMA, record_key=key, ordering_field="version", partition_fields=partitions,
                            buckets=3, path=path, log_block_format=block_format)
        model = TableModel(tuple(key), "version", tuple(partitions), buckets=3)
        rng = random.Random(len(layout))
        commit = ordered_history(client, model, rng, commits=8)
        want = expected(model)
        assert data(client.read("t")) == want
        assert data(hudi_rs_read(path)) == want
        assert data(hudi_spark.read(path)) == want

        run_service(cluster, "compaction")
        model.compact()
        ordered_history(client, model, rng, commits=3, first=commit)
        want = expected(model)
        assert data(client.read("t")) == want
        assert data(hudi_rs_read(path)) == want
        assert data(hudi_spark.read(path)) == want
    finally:
        cluster.close()


def _ordering_values(ordering: pa.DataType, values: list[int]) -> list:
    """Ordering values of the given type in the order of ``values``."""
    if pa.types.is_string(ordering):
        return [f"{v:04d}" for v in values]
    if pa.types.is_timestamp(ordering):
        return pa.array([v * 1_000_000 for v in values], pa.int64()).cast(ordering).to_pylist()
    return pa.array(values, pa.int32()).cast(ordering).to_pylist()


@pytest.mark.parametrize(
    "ordering", [pa.int32(), pa.float64(), pa.string(), pa.date32(), pa.timestamp("us", "UTC")], ids=str
)
def test_ordered_deletes_of_any_ordering_type(hudi_spark: HudiSpark, tmp_path, ordering: pa.DataType) -> None:
    """Ordered deletes through the tier against base and log records of the same keys,
    older and newer, and late records after them, for each type an ordering field may
    have: Hudi, hudi-rs and memtier read the same rows."""
    v = dict(zip([1, 5, 9, 10, 12, 15, 20], _ordering_values(ordering, [1, 5, 9, 10, 12, 15, 20]), strict=True))
    schema = pa.schema([("id", pa.int64()), ("o", ordering), ("v", pa.string())])
    path = str(tmp_path / "t")
    cluster = InProcessCluster(str(tmp_path / "cluster"))

    def upsert(ids: list[int], o: int, value: str) -> None:
        client.write("t", pa.table({"id": ids, "o": [v[o]] * len(ids), "v": [value] * len(ids)}, schema=schema))
        client.flush("t")

    def delete(ids: list[int], os: list[int]) -> None:
        client.delete("t", pa.table({"id": pa.array(ids, pa.int64()), "o": pa.array([v[o] for o in os], ordering)}))
        client.flush("t")

    try:
        cluster.add_server("ts-0")
        client = cluster.client()
        client.create_table("t", schema, record_key="id", ordering_field="o", buckets=1, path=path)
        upsert([1, 2, 3, 4, 5, 6], 10, "base")
        upsert([7], 10, "log")
        delete([1, 2, 7], [5, 15, 20])  # older than the base version of 1: it stays
        upsert([2, 7], 12, "late")  # older than the deletes: hidden
        delete([6], [9])
        upsert([8], 1, "new")
        want = [(k, v[o], value) for k, o, value in
                [(1, 10, "base"), (3, 10, "base"), (4, 10, "base"), (5, 10, "base"), (6, 10, "base"), (8, 1, "new")]]
        assert rows(client.read("t"), schema.names) == want
        assert rows(hudi_rs_read(path), schema.names) == want
        assert rows(hudi_spark.read(path), schema.names) == want
    finally:
        cluster.close()
