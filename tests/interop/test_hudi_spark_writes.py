"""Interop in, from the reference writer: memtier reads the tables Apache Hudi on Spark
writes (``df.write.format("hudi")``, Hudi 1.0 on Spark 3.5): merge-on-read and
copy-on-write, bucket index and Hudi's default (simple) index, table versions 6 and 8,
partitioned or not, with the rows Hudi reads back and a model predicts. A merge-on-read
bucket-index table Hudi created takes writes through the tier, and Hudi reads them back.

Histories are random (seeded) upserts, late records that must lose, and deletes; each
Spark write costs seconds, so they are short."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field

import pyarrow as pa
import pytest

from memtier.hudi import HudiTable
from memtier.hudi.mdt import has_metadata_table
from tests.interop.test_hudi_rs_reads_ours import make_row, to_arrow
from tests.interop.test_hudi_spark_reads_ours import data, expected
from tests.support.hudi_spark import (
    KEEP_LOGS,
    HudiSpark,
    HudiSparkError,
    assert_metadata_table_current,
    writer_options,
)
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.inprocess import InProcessCluster
from tests.support.model import TableModel

pytestmark = [pytest.mark.slow, pytest.mark.spark]

KEYS = 40
BUCKETS = 2


@dataclass(frozen=True)
class Layout:
    table_type: str
    version: int
    buckets: int | None  # None: Hudi's default index
    partitions: tuple[str, ...] = ("region",)
    metadata: bool = False  # Hudi's metadata table

    @property
    def copy_on_write(self) -> bool:
        return self.table_type == "COPY_ON_WRITE"


LAYOUTS = {
    "mor-bucket-v6": Layout("MERGE_ON_READ", 6, BUCKETS),
    "mor-bucket-v8-metadata": Layout("MERGE_ON_READ", 8, BUCKETS, metadata=True),
    "mor-simple-v8-nonpartitioned": Layout("MERGE_ON_READ", 8, None, partitions=()),
    "cow-simple-v6": Layout("COPY_ON_WRITE", 6, None),
}


@dataclass
class SparkWritten:
    """A table Hudi on Spark wrote, the model of it, and its instants."""

    path: str
    layout: Layout
    model: TableModel
    instants: list[str] = field(default_factory=list)
    models: list[TableModel] = field(default_factory=list)
    deleted: set[int] = field(default_factory=set)  # keys deleted (and never written again)


def options(layout: Layout, name: str, operation: str = "upsert") -> dict[str, str]:
    return writer_options(
        name, "id", "version", list(layout.partitions), table_type=layout.table_type,
        buckets=layout.buckets, table_version=layout.version, operation=operation,
        **{"hoodie.metadata.enable": str(layout.metadata).lower(),
           # its column stats fail on null values: NullPointerException "fieldValue is null"
           "hoodie.metadata.index.column.stats.enable": "false",
           "hoodie.metadata.index.partition.stats.enable": "false"},
    )


def spark_history(spark: HudiSpark, path: str, layout: Layout, seed: int) -> SparkWritten:
    """Insert every key, then upserts (some late), a delete, more upserts; never a key
    written again after its delete (Hudi 1.0.2's reader fails on that: see
    test_hudi_1_0_2_fails_on_a_key_reinserted_after_a_delete_in_the_logs)."""
    rng = random.Random(seed)
    model = TableModel(("id",), "version", layout.partitions, buckets=layout.buckets or 1,
                       copy_on_write=layout.copy_on_write)
    deleted = set(rng.sample(range(KEYS), 6))
    written = SparkWritten(path, layout, model, deleted=deleted)
    name = path.rsplit("/", 1)[-1].replace("-", "_")
    steps = [
        ("upsert", [make_row(rng, k, 1) for k in range(KEYS)]),
        ("upsert", [make_row(rng, k, rng.choice([2, 2, 0])) for k in rng.sample(range(KEYS + 10), 20)]),
        ("delete", [make_row(rng, k, 0) for k in sorted(deleted)]),
        ("upsert", [make_row(rng, k, rng.choice([3, 0])) for k in rng.sample(range(KEYS + 10), 15)
                    if k not in deleted]),
    ]
    for number, (kind, batch) in enumerate(steps, start=1):
        spark.write(path, to_arrow(batch), options(layout, name, kind))
        (model.delete if kind == "delete" else model.upsert)(number, batch)
        written.models.append(copy.deepcopy(model))
    written.instants = [i.timestamp for i in HudiTable.open(path).timeline().completed()
                        if i.action in ("commit", "deltacommit")]
    assert len(written.instants) == len(steps)
    return written


@pytest.fixture(scope="module", params=list(LAYOUTS))
def spark_written(request: pytest.FixtureRequest, hudi_spark: HudiSpark,
                  tmp_path_factory: pytest.TempPathFactory) -> SparkWritten:
    path = str(tmp_path_factory.mktemp("spark-writes") / request.param)
    return spark_history(hudi_spark, path, LAYOUTS[request.param], seed=len(request.param))


def test_memtier_reads_what_hudi_wrote(hudi_spark: HudiSpark, spark_written: SparkWritten) -> None:
    table = HudiTable.open(spark_written.path)
    assert table.config.version == spark_written.layout.version
    want = expected(spark_written.model)
    assert data(hudi_spark.read(spark_written.path)) == want
    assert data(table.read()) == want
    assert data(table.read(mode="read_optimized")) == data(hudi_spark.read(spark_written.path, "read_optimized"))


def test_time_travel(hudi_spark: HudiSpark, spark_written: SparkWritten) -> None:
    table = HudiTable.open(spark_written.path)
    instant = spark_written.instants[1]
    want = expected(spark_written.models[1])
    assert data(table.read(as_of=instant)) == want
    assert data(hudi_spark.read(spark_written.path, as_of=instant)) == want


def test_the_tier_writes_into_a_bucket_index_table_hudi_created(
    hudi_spark: HudiSpark, spark_written: SparkWritten, tmp_path
) -> None:
    """A merge-on-read bucket-index table of version 6: told its bucket count (Hudi keeps
    it in writer configs only), served by the tier, written and flushed there; Hudi reads
    what the tier wrote. Hudi's metadata table, where the table has one (version 8), is kept
    current: Hudi's reader (metadata table on, its default) lists the files through it and
    sees the tier's rows, Hudi's view of it equals the listing, and Hudi's next write (its
    metadata table on) goes on from it."""
    layout = spark_written.layout
    table = HudiTable.open(spark_written.path)
    if layout.buckets is None or layout.copy_on_write:
        pytest.skip("the tier writes merge-on-read bucket-index tables")
    assert has_metadata_table(table.meta) == layout.metadata
    table.set_bucket_index(layout.buckets)
    assert has_metadata_table(table.meta) == layout.metadata
    cluster = InProcessCluster(str(tmp_path / "cluster"))
    try:
        cluster.add_server("ts-0")
        client = cluster.client()
        client.register_table("hudi_made", spark_written.path)
        rng = random.Random(5)
        model = spark_written.model
        for number in range(2):
            batch = [make_row(rng, k, rng.choice([4 + number, 0])) for k in rng.sample(range(KEYS + 10), 12)
                     if k not in spark_written.deleted]
            client.write("hudi_made", to_arrow(batch))
            model.upsert(len(spark_written.instants) + 1 + number, batch)
            assert client.flush("hudi_made")
        want = expected(model)
        assert data(client.read("hudi_made")) == want
        assert data(hudi_spark.read(spark_written.path)) == want
        assert data(HudiTable.open(spark_written.path).read()) == want
        if layout.metadata:
            assert_metadata_table_current(hudi_spark, spark_written.path)
    finally:
        cluster.close()
    if layout.metadata:  # Hudi writes again, its metadata table on
        again = [make_row(rng, k, 9) for k in rng.sample(range(KEYS), 5) if k not in spark_written.deleted]
        name = spark_written.path.rsplit("/", 1)[-1].replace("-", "_")
        hudi_spark.write(spark_written.path, to_arrow(again), options(layout, name))
        model.upsert(len(spark_written.instants) + 3, again)
        assert has_metadata_table(HudiTable.open(spark_written.path).meta)
        assert data(hudi_spark.read(spark_written.path)) == expected(model)
        assert data(HudiTable.open(spark_written.path).read()) == expected(model)
        assert_metadata_table_current(hudi_spark, spark_written.path)



def test_hudi_1_0_2_fails_on_a_key_reinserted_after_a_delete_in_the_logs(hudi_spark: HudiSpark, tmp_path) -> None:
    """Hudi 1.0.2's default (file-group) reader of its own merge-on-read table, whose logs
    hold a delete and then an upsert of the same key, fails with a ClassCastException
    (the delete's ordering value is an Integer, the long field's a Long); its older reader
    (hoodie.file.group.reader.enabled=false), memtier and the model agree on the rows.
    docs/interoperability.md."""
    layout = Layout("MERGE_ON_READ", 6, BUCKETS)
    path = str(tmp_path / "reinserted")
    rng = random.Random(11)
    model = TableModel(("id",), "version", layout.partitions, buckets=BUCKETS)
    steps = [("upsert", [make_row(rng, k, 1) for k in range(10)]),
             ("delete", [make_row(rng, k, 0) for k in (1, 2)]),
             ("upsert", [make_row(rng, k, 2) for k in (1, 2, 3)])]
    for number, (kind, batch) in enumerate(steps, start=1):
        hudi_spark.write(path, to_arrow(batch), options(layout, "reinserted", kind))
        (model.delete if kind == "delete" else model.upsert)(number, batch)
    with pytest.raises(HudiSparkError, match="ClassCastException"):
        hudi_spark.read(path)
    older = hudi_spark.read_with(path, {"hoodie.file.group.reader.enabled": "false"})
    assert data(older) == expected(model)
    assert data(HudiTable.open(path).read()) == expected(model)


#: (ids, ordering value, v, deleted): base records, a log record, ordered deletes older and
#: newer than what they meet, late records after them, a newer key.
ORDERED_DELETES = [
    ([1, 2, 3, 4, 5, 6], 10, "base", False),
    ([7], 10, "log", False),
    ([1, 2, 7], [5, 15, 20], None, True),
    ([2, 7], 12, "late", False),
    ([6], 9, None, True),
    ([8], 1, "new", False),
]
ORDERED = [(1, 10, "base"), (3, 10, "base"), (4, 10, "base"), (5, 10, "base"), (6, 10, "base"), (8, 1, "new")]
IN_COMMIT_ORDER = [(2, 12, "late"), (3, 10, "base"), (4, 10, "base"), (5, 10, "base"), (7, 12, "late"), (8, 1, "new")]


def test_ordered_deletes_in_hudis_tables_and_memtiers(hudi_spark: HudiSpark, tmp_path) -> None:
    """Deletes carrying their own ordering value, written by Hudi (upserts flagged
    ``_hoodie_is_deleted``: delete blocks whose ordering values are Hudi 1.0's wrapper
    records) and by the tier (``client.delete`` with the ordering column): Hudi's default
    reader, memtier and hudi-rs read both tables alike. Hudi 1.0.2's older reader
    (hoodie.file.group.reader.enabled=false) applies them in commit order on both.
    docs/interoperability.md."""
    schema = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("v", pa.string())])
    flagged = pa.schema([*schema, pa.field("_hoodie_is_deleted", pa.bool_())])

    def batch(ids: list[int], ts: int | list[int], v: str | None, deleted: bool) -> pa.Table:
        ordering = ts if isinstance(ts, list) else [ts] * len(ids)
        return pa.table({"id": ids, "ts": ordering, "v": [v] * len(ids), "_hoodie_is_deleted": [deleted] * len(ids)},
                        schema=flagged)

    hudis = str(tmp_path / "hudis")
    options = {**writer_options("hudis", "id", "ts", buckets=1, table_version=6), **KEEP_LOGS}
    for step in ORDERED_DELETES:
        hudi_spark.write(hudis, batch(*step), options)

    ours = str(tmp_path / "ours")
    cluster = InProcessCluster(str(tmp_path / "cluster"))
    try:
        cluster.add_server("ts-0")
        client = cluster.client()
        client.create_table("t", schema, record_key="id", ordering_field="ts", buckets=1, path=ours)
        for step in ORDERED_DELETES:
            rows_ = batch(*step)
            if step[3]:
                client.delete("t", rows_.select(["id", "ts"]))
            else:
                client.write("t", rows_.select(schema.names))
            assert client.flush("t")
    finally:
        cluster.close()

    for path in (hudis, ours):
        assert rows(hudi_spark.read(path), schema.names) == ORDERED, path
        assert rows(HudiTable.open(path).read(), schema.names) == ORDERED, path
        assert rows(hudi_rs_read(path), schema.names) == ORDERED, path
        older = hudi_spark.read_with(path, {"hoodie.file.group.reader.enabled": "false"})
        assert rows(older, schema.names) == IN_COMMIT_ORDER, path
