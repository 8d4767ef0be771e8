"""Which table versions the engines read: memtier writes the same merge-on-read table as
Hudi table version 6, 8 and 9 (a base file per file group, then an update in a log
file), registers each in a metastore, and Trino 476 (its Hudi connector, over a file
metastore) and Presto 0.287 (its Hudi and Hive connectors, over a Hive Metastore 3.1.3)
read them. What each reads is pinned here (README, "Table versions"); Hudi on Spark and
hudi-rs: tests/interop/test_hudi_1x_reads_ours.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from memtier.catalog import PRESTO_CONNECTORS, open_metastore, presto_catalog_properties, sync_table
from memtier.hudi import HudiTable
from tests.support.hms import HiveMetastoreServer, run_hms
from tests.support.presto import PrestoServer, run_presto
from tests.support.trino import TrinoServer

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("amount", pa.float64())])
COLUMNS = ["id", "ts", "city", "amount"]
VERSIONS = (6, 8, 9)
CATALOGS = {connector.split("-")[0]: connector for connector in PRESTO_CONNECTORS}
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


@pytest.fixture(scope="module")
def hms() -> Iterator[HiveMetastoreServer]:
    with run_hms("3.1.3") as server:
        yield server


@pytest.fixture(scope="module")
def presto(hms: HiveMetastoreServer) -> Iterator[PrestoServer]:
    with run_presto({name: presto_catalog_properties(hms.uri, connector)
                     for name, connector in CATALOGS.items()}) as server:
        yield server


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
