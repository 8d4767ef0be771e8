"""Table versions 8 and 9 (and 6) written by memtier: ``create_table(..., table_version=...)``, the
write tier's flushes, deletes, a compaction and a clustering of the table-service pool,
then more flushes; the table keeps its version and timeline layout 2 (completion times in
completed instants' names, log files named by their deltacommit, Avro commit metadata),
and Apache Hudi 1.0.2, 1.1.1 and 1.2.0 on Spark and hudi-rs 0.5 read it as memtier and the
model do, where they read that version at all (measured here: Hudi 1.0.2 does not read
version 9). A bucket-index table Hudi 1.1+/1.2 created (version 9) stays version 9 when
the tier writes it, and Hudi reads those writes."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from memtier.hudi import HudiTable
from memtier.hudi.filenames import LogFile, classify
from memtier.hudi.fsview import list_data_files
from memtier.io import basename
from tests.interop.test_hudi_rs_reads_ours import SCHEMA, make_row, to_arrow
from tests.interop.test_hudi_spark_reads_ours import KEYS, data, expected, run_service
from tests.support.hudi_spark import HUDI_VERSIONS, HudiSpark, HudiSparkError, writer_options
from tests.support.hudirs import hudi_rs_read
from tests.support.inprocess import InProcessCluster
from tests.support.model import TableModel

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TABLE_VERSIONS = (6, 8, 9)
#: Hudi 1.0 (table version 8) predates version 9: it refuses such a table.
READS = {hudi: [v for v in TABLE_VERSIONS if v <= written] for hudi, written in HUDI_VERSIONS.items()}


class Ours:
    """A table the write tier wrote, with its model."""

    def __init__(self, path: str, version: int) -> None:
        self.path = path
        self.version = version
        self.model = TableModel(("id",), "version", ("region",), buckets=2)
        self.commits = 0

    def upsert(self, client, rows: list[dict]) -> None:
        client.write("t", to_arrow(rows))
        self.commits += 1
        self.model.upsert(self.commits, rows)

    def delete(self, client, rows: list[dict]) -> None:
        client.delete("t", to_arrow(rows).select(["id", "region"]))
        self.commits += 1
        self.model.delete(self.commits, rows)


def write_through_the_tier(root, version: int) -> Ours:
    """Upserts (some late) and deletes, flushed in rounds; a compaction, a clustering."""
    ours = Ours(str(root / f"v{version}"), version)
    rng = random.Random(version)
    cluster = InProcessCluster(str(root / f"cluster-v{version}"))
    try:
        cluster.add_server("ts-0")
        client = cluster.client()
        client.create_table("t", SCHEMA, record_key="id", ordering_field="version", partition_fields="region",
                            buckets=2, path=ours.path, table_version=version)
        ours.upsert(client, [make_row(rng, k, 1) for k in range(KEYS)])
        client.flush("t")
        retired = set(rng.sample(range(KEYS), 8))
        ours.upsert(client, [make_row(rng, k, rng.choice([2, 0])) for k in rng.sample(range(KEYS), 30)
                             if k not in retired])
        ours.delete(client, [make_row(rng, k, 0) for k in sorted(retired)])
        client.flush("t")
        run_service(cluster, "compaction")
        ours.model.compact()
        ours.upsert(client, [make_row(rng, k, 3) for k in rng.sample(range(KEYS + 10), 20) if k not in retired])
        client.flush("t")
        run_service(cluster, "clustering", sort_columns=["version"])
        ours.upsert(client, [make_row(rng, k, 4) for k in rng.sample(range(KEYS + 10), 15) if k not in retired])
        client.flush("t")
        assert data(client.read("t")) == expected(ours.model)
    finally:
        cluster.close()
    return ours


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Ours]:
    root = tmp_path_factory.mktemp("versions")
    return {v: write_through_the_tier(root, v) for v in TABLE_VERSIONS}


@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HudiSpark]:
    with HudiSpark(tmp_path_factory.mktemp("spark"), version=request.param) as session:
        yield session


@pytest.mark.parametrize("version", (8, 9))
def test_the_table_keeps_its_version_and_layout(ours: dict[int, Ours], version: int) -> None:
    table = HudiTable.open(ours[version].path)
    assert (table.config.version, table.config.timeline_layout_version) == (version, 2)
    timeline = table.timeline()
    done = timeline.completed(None)
    assert {i.action for i in done} >= {"deltacommit", "commit", "replacecommit"}
    assert all(i.completion_time and i.completion_time > i.timestamp for i in done)
    deltacommits = {i.timestamp for i in timeline.completed(("deltacommit",))}
    logs = [f for f in map(classify, (basename(i.path) for i in list_data_files(table.io, table.path)))
            if isinstance(f, LogFile)]
    assert logs and all(log.base_instant in deltacommits for log in logs)
    assert data(table.read()) == expected(ours[version].model)
    assert data(hudi_rs_read(ours[version].path)) == expected(ours[version].model)
    assert data(hudi_rs_read(ours[version].path, "read_optimized")) == data(table.read(mode="read_optimized"))


@pytest.mark.parametrize("spark", sorted(HUDI_VERSIONS), indirect=True)
def test_hudi_reads_ours(spark: HudiSpark, ours: dict[int, Ours], tmp_path) -> None:
    """Each Hudi release reads the versions it knows as memtier does; Hudi 1.0.2 refuses
    version 9. Then a bucket-index table that release created stays its version under the
    tier's writes (Hudi 1.1+ creates version 9), and Hudi reads them."""
    hudi = spark.versions["hudi"]
    for version in TABLE_VERSIONS:
        path = ours[version].path
        if version not in READS[hudi]:
            with pytest.raises(HudiSparkError, match="(?i)version"):
                spark.read(path)
            continue
        assert data(spark.read(path)) == expected(ours[version].model), (hudi, version)
        assert data(spark.read(path, "read_optimized")) == data(HudiTable.open(path).read(mode="read_optimized"))
    written_by_hudi(spark, tmp_path)


def written_by_hudi(spark: HudiSpark, tmp_path) -> None:
    path = str(tmp_path / "hudis")
    rng = random.Random(7)
    model = TableModel(("id",), "version", ("region",), buckets=2)
    rows = [make_row(rng, k, 1) for k in range(KEYS)]
    options = writer_options("hudis", "id", "version", "region", buckets=2,
                             **{"hoodie.metadata.enable": "false"})
    spark.write(path, to_arrow(rows), options)
    model.upsert(1, rows)
    table = HudiTable.open(path)
    version = table.config.version
    assert version == HUDI_VERSIONS[spark.versions["hudi"]]
    table.set_bucket_index(2)
    cluster = InProcessCluster(str(tmp_path / "cluster"))
    try:
        cluster.add_server("ts-0")
        client = cluster.client()
        client.register_table("hudis", path)
        more = [make_row(rng, k, rng.choice([2, 0])) for k in rng.sample(range(KEYS + 10), 25)]
        client.write("hudis", to_arrow(more))
        model.upsert(2, more)
        assert client.flush("hudis")
        assert data(client.read("hudis")) == expected(model)
    finally:
        cluster.close()
    assert HudiTable.open(path).config.version == version
    assert data(spark.read(path)) == expected(model)
    assert data(hudi_rs_read(path)) == expected(model)
