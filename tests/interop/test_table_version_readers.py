"""Which table versions the engines read: memtier writes the same merge-on-read table as
Hudi table version 6, 8 and 9 (a base file per file group, then an update in a log
file), registers each in a metastore, and Trino 476 (its Hudi connector, over a file
metastore) and Presto 0.287 (its Hudi and Hive connectors, over a Hive Metastore 3.1.3)
read them. What each reads is pinned here (docs/interoperability.md, the readers table); Hudi on Spark and
hudi-rs: tests/interop/test_hudi_1x_reads_ours.py. Then a table Hudi 1.1.1 on Spark wrote
with its defaults, adopted (converted into buckets), written through the tier and
compacted: Trino reads it through the Hive Metastore as memtier does, Presto as pinned."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from memtier.catalog import (
    open_metastore,
    sync_table,
    trino_catalog_properties,
)
from memtier.compaction.worker import ServiceWorker
from memtier.hudi import HudiTable
from memtier.hudi.adopt import fits_buckets
from memtier.hudi.fsview import FileSystemView
from tests.support.hms import HiveMetastoreServer
from tests.support.hudi_spark import HudiSpark, writer_options
from tests.support.inprocess import InProcessCluster
from tests.support.presto import PrestoServer
from tests.support.trino import TrinoServer

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("amount", pa.float64())])
COLUMNS = ["id", "ts", "city", "amount"]
VERSIONS = (6, 8, 9)
#: engine view -> the table versions it reads (the others fail or return wrong rows: see
#: ``outcomes``); measured with this module.
READS: dict[str, tuple[int, ...]] = {
    "trino ro": (6, 8, 9),
    "presto hudi rt": (6,),
    "presto hudi ro": (6,),
    "presto hive ro": (6,),
}


def written(root, version: int) -> HudiTable:
    table = HudiTable.create(str(root / f"v{version}"), SCHEMA, record_key="id", ordering_field="ts",
                             partition_fields="city", buckets=2, name=f"orders_v{version}", table_version=version)
    table.write(pa.table({"id": [1, 2, 3, 4], "ts": [1] * 4, "city": ["oslo", "rome", "oslo", "rome"],
                          "amount": [10.0, 20.0, 30.0, 40.0]}, schema=SCHEMA))
    table.write(pa.table({"id": [1], "ts": [2], "city": ["oslo"], "amount": [11.0]}, schema=SCHEMA))
    return table


def _rows(rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in COLUMNS) if isinstance(r, dict) else tuple(r) for r in rows)


def _outcome(query: Any, want: list[tuple[Any, ...]]) -> str:
    """``reads`` when the engine returns ``want``, else what it did."""
    try:
        got = _rows(query())
    except Exception as e:  # noqa: BLE001 - the engine's failure is the measurement
        return f"fails: {str(e).splitlines()[0][:200]}"
    return "reads" if got == want else f"wrong rows: {got}"


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[int, HudiTable]:
    root = tmp_path_factory.mktemp("versions")
    return {v: written(root, v) for v in VERSIONS}


def _check(outcomes: dict[str, dict[int, str]]) -> None:
    readable = {view: tuple(v for v, outcome in by_version.items() if outcome == "reads")
                for view, by_version in outcomes.items()}
    assert readable == {view: READS[view] for view in outcomes}, outcomes


def test_trino_476(trino: TrinoServer, tables: dict[int, HudiTable]) -> None:
    outcomes: dict[str, dict[int, str]] = {"trino ro": {}}
    for version, table in tables.items():
        sync_table(table.meta, trino.metastore_handle())
        want = _rows(table.read(mode="read_optimized").to_pylist())
        outcomes["trino ro"][version] = _outcome(
            lambda t=table: trino.query(f"SELECT id, ts, city, amount FROM {t.config.name}_ro"), want)
    _check(outcomes)


def test_presto_0_287(hms: HiveMetastoreServer, presto: PrestoServer, tables: dict[int, HudiTable]) -> None:
    outcomes: dict[str, dict[int, str]] = {"presto hudi rt": {}, "presto hudi ro": {}, "presto hive ro": {}}
    for version, table in tables.items():
        sync_table(table.meta, open_metastore(hms.uri))
        views = {"presto hudi rt": ("hudi", "_rt", table.read()), "presto hudi ro": ("hudi", "_ro", None),
                 "presto hive ro": ("hive", "_ro", None)}
        for view, (catalog, suffix, snapshot) in views.items():
            want = _rows((snapshot if snapshot is not None else table.read(mode="read_optimized")).to_pylist())
            sql = f"SELECT id, ts, city, amount FROM {table.config.name}{suffix}"
            outcomes[view][version] = _outcome(lambda s=sql, c=catalog: presto.query(s, catalog=c), want)
    _check(outcomes)


#: What Presto 0.287 does with the adopted table (version 9, as Hudi 1.1.1 wrote it), per
#: view: measured with this module (it reads table version 6 only, see ``READS``).
ADOPTED_PRESTO: dict[str, str] = {view: "fails: GENERIC_INTERNAL_ERROR: Internal error"
                                   for view in ("presto hudi rt", "presto hudi ro", "presto hive ro")}


@pytest.fixture(scope="module")
def adopted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HudiTable, list[tuple[Any, ...]]]]:
    """A partitioned merge-on-read table Hudi 1.1.1 on Spark wrote with its default options
    (simple index, metadata table on: version 9), adopted with 2 buckets, written through
    the tier (upserts and a delete) and compacted; with the rows memtier reads."""
    root = tmp_path_factory.mktemp("adopted")
    path = str(root / "trips")
    options = writer_options("trips", "id", "ts", "city")
    with HudiSpark(root, version="1.1.1") as spark:
        spark.write(path, pa.table({"id": list(range(12)), "ts": [1] * 12,
                                    "city": [("oslo", "rome", "lima")[i % 3] for i in range(12)],
                                    "amount": [float(i) for i in range(12)]}, schema=SCHEMA), options)
        spark.write(path, pa.table({"id": [0, 4], "ts": [2, 2], "city": ["oslo", "rome"], "amount": [0.5, 4.5]},
                                   schema=SCHEMA), options)
    cluster = InProcessCluster(str(root / "cluster"))
    try:
        cluster.add_server("ts-0")
        client = cluster.client()
        assert client.register_table("trips", path, buckets=2)["conversion"] is not None
        _run_pool(cluster)
        client.write("trips", pa.table({"id": [1, 20], "ts": [3, 3], "city": ["rome", "lima"],
                                        "amount": [1.5, 20.0]}, schema=SCHEMA))
        client.delete("trips", pa.table({"id": [3], "city": ["oslo"]}))
        assert client.flush("trips")
        client.compact("trips", wait=False)
        _run_pool(cluster)
        want = _rows(client.read("trips").to_pylist())
    finally:
        cluster.close()
    table = HudiTable.open(path)
    assert table.config.version == 9
    assert not os.path.exists(os.path.join(path, ".hoodie", "timeline", "history"))  # Trino fails on it empty
    assert fits_buckets(FileSystemView.build(table.io, path, table.timeline()), 2)
    assert _rows(table.read(mode="read_optimized").to_pylist()) == want  # compacted: no log left
    yield table, want


def _run_pool(cluster: InProcessCluster) -> None:
    while (task := ServiceWorker("pool", cluster.master).run_once()) is not None:
        assert task["state"] == "completed", task


def test_trino_476_reads_an_adopted_compacted_table_through_the_hive_metastore(
    trino: TrinoServer, hms: HiveMetastoreServer, adopted: tuple[HudiTable, list[tuple[Any, ...]]]
) -> None:
    table, want = adopted
    assert (3, 1, "oslo", 3.0) not in want and (20, 3, "lima", 20.0) in want and (1, 3, "rome", 1.5) in want
    assert sync_table(table.meta, open_metastore(hms.uri), database="adopted").tables == ["trips_ro", "trips_rt"]
    with trino.catalog("adopted_hms", trino_catalog_properties(hms.uri)):
        for view in ("trips_ro", "trips_rt"):
            got = _rows(trino.query(f"SELECT id, ts, city, amount FROM adopted.{view}", catalog="adopted_hms"))
            assert got == want, view
        assert _rows(trino.query("SELECT id, ts, city, amount FROM adopted.trips_ro WHERE city = 'rome'",
                                 catalog="adopted_hms")) == [r for r in want if r[2] == "rome"]


def test_presto_0_287_on_an_adopted_compacted_table(
    hms: HiveMetastoreServer, presto: PrestoServer, adopted: tuple[HudiTable, list[tuple[Any, ...]]]
) -> None:
    table, want = adopted
    sync_table(table.meta, open_metastore(hms.uri), database="adopted")
    outcomes = {}
    for view, (catalog, suffix) in {"presto hudi rt": ("hudi", "_rt"), "presto hudi ro": ("hudi", "_ro"),
                                    "presto hive ro": ("hive", "_ro")}.items():
        sql = f"SELECT id, ts, city, amount FROM adopted.trips{suffix}"
        outcomes[view] = _outcome(lambda s=sql, c=catalog: presto.query(s, catalog=c), want)
    assert outcomes == ADOPTED_PRESTO, outcomes
