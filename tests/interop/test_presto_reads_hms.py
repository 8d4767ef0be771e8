"""Interop out to Presto: memtier registers its tables in a real Hive Metastore (Apache
Hive's standalone server 3.1.3) and a real Presto 0.287 reads them by name, through its
Hudi connector and through its Hive connector, each with the catalog file
:func:`memtier.catalog.presto_catalog_properties` gives. Presto's Hudi readers merge log
files, so ``name_rt`` is the snapshot (updates, deletes in commit order and by ordering
value) and ``name_ro`` the base files, before and after a compaction.

Presto 0.287 cannot read a Hive 4 metastore (it calls ``get_table``, which Hive 4 removed:
measured by hand), so only Hive 3.1.3 is run."""

from __future__ import annotations

import contextlib
from typing import Any

import pyarrow as pa
import pytest

from memtier.catalog import presto_catalog_properties
from memtier.cli import main
from memtier.hudi import HudiTable
from memtier.io import join, open_fileio
from tests.support.inprocess import InProcessCluster
from tests.support.presto import CATALOGS, PrestoServer

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("amount", pa.float64())])
COLUMNS = ["id", "ts", "city", "amount"]


def _rows(rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in COLUMNS) if isinstance(r, dict) else tuple(r) for r in rows)


def _each_catalog(presto: PrestoServer, sql: str) -> dict[str, list[tuple[Any, ...]]]:
    return {name: _rows(presto.query(sql, catalog=name)) for name in CATALOGS}


def _batch(ids: list[int], ts: list[int], amounts: list[float]) -> pa.Table:
    return pa.table({"id": ids, "ts": ts, "city": ["oslo" if i % 2 == 0 else "rome" for i in ids],
                     "amount": amounts}, schema=SCHEMA)


def _expect(presto: PrestoServer, client: Any, table: str, *, compacting: bool = False) -> None:
    """Both views, in both catalogs, equal memtier's; so do a partition and a key filter.
    ``compacting``: while a compaction of every file group is pending, Presto 0.287's Hudi
    connector reads the read-optimized view as empty (each file group's latest slice is
    the pending one, which has no base file yet); its Hive connector and both snapshots
    are right (measured; not checked against a table Hudi's own writer compacts)."""
    snapshot = _rows(client.read(table).to_pylist())
    read_optimized = _rows(client.read(table, mode="read_optimized").to_pylist())
    select = f"SELECT id, ts, city, amount FROM live.{table}"
    assert _each_catalog(presto, select + "_rt") == {name: snapshot for name in CATALOGS}
    assert _each_catalog(presto, select + "_ro") == {
        name: [] if compacting and connector == "hudi" else read_optimized for name, connector in CATALOGS.items()}
    rome = [r for r in snapshot if r[2] == "rome"]
    assert _each_catalog(presto, select + "_rt WHERE city = 'rome'") == {name: rome for name in CATALOGS}
    one = [r for r in snapshot if r[0] == 6]
    assert _each_catalog(presto, select + "_rt WHERE id = 6 AND city = 'oslo'") == {name: one for name in CATALOGS}


def _expect_while_files_are_being_written(presto: PrestoServer, client: Any, table: str, instant: str) -> None:
    """The same while a base file, a log file and an instant of the pending ``instant`` are
    half written (as a compaction in progress, or a crash, leaves them): readers must not
    take the temporary files for Hudi files."""
    path = client.describe(table)["path"]
    fileio = open_fileio(path)
    names = [join(path, "city=oslo", f"{'1' * 8}-0000-0000-0000-000000000000-0_0-0-0_{instant}.parquet"),
             join(path, "city=oslo", f".{'1' * 8}-0000-0000-0000-000000000000-0_{instant}.log.1_0-0-0"),
             join(path, ".hoodie", f"{instant}.deltacommit")]
    with pytest.raises(RuntimeError, match="abandoned"), contextlib.ExitStack() as writing:
        for name in names:
            writing.enter_context(fileio.open_output(name)).write(b"PAR1 half a file")
        _expect(presto, client, table, compacting=True)
        raise RuntimeError("abandoned")  # the writes fail: nothing published
    assert not any(fileio.exists(name) for name in names)


def test_presto_reads_the_snapshot_and_the_base_files_of_a_tier_written_table(presto, hms, tmp_path) -> None:
    cluster = InProcessCluster(str(tmp_path / "root"), catalog={
        "catalog.hive-metastore": hms.uri, "catalog.database": "live"})
    cluster.add_server("ts-0")
    try:
        client = cluster.client()
        client.create_table("events", SCHEMA, record_key="id", ordering_field="ts", partition_fields="city",
                            buckets=2)
        client.write("events", _batch(list(range(10)), [1] * 10, [float(i) for i in range(10)]))
        client.flush("events")  # base files
        client.write("events", _batch([0, 1, 5], [2, 2, 10], [9.0, 9.0, 55.0]))  # updates, into log files
        client.delete("events", pa.table({"id": [2, 3], "city": ["oslo", "rome"]}))  # in commit order
        client.flush("events")
        # by ordering value: 4 (ts 1) goes, 5 (ts 10) stays
        client.delete("events", pa.table({"id": [4, 5], "city": ["oslo", "rome"], "ts": [5, 5]}))
        client.flush("events")
        snapshot = _rows(client.read("events").to_pylist())
        assert [r[0] for r in snapshot] == [0, 1, 5, 6, 7, 8, 9] and (5, 10, "rome", 55.0) in snapshot
        assert len(client.read("events", mode="read_optimized")) == 10  # the changes wait in log files
        _expect(presto, client, "events")

        cluster.plan_service("events")
        (pending,) = HudiTable.open(client.describe("events")["path"]).timeline().pending(("compaction",))
        _expect_while_files_are_being_written(presto, client, "events", pending.timestamp)
        cluster.run_planned_service()
        assert _rows(client.read("events", mode="read_optimized").to_pylist()) == snapshot
        _expect(presto, client, "events")
    finally:
        cluster.close()


def test_a_copy_on_write_table_synced_by_the_cli_is_read_by_both_connectors(presto, hms, tmp_path,
                                                                             capsys) -> None:
    flat = HudiTable.create(str(tmp_path / "flat"), SCHEMA, record_key="id", ordering_field="ts", buckets=1,
                            table_type="COPY_ON_WRITE")
    flat.write(pa.table({"id": [7, 8], "ts": [1, 1], "city": ["x", "y"], "amount": [7.0, 8.0]}, schema=SCHEMA))
    flat.write(pa.table({"id": [8], "ts": [2], "city": ["y"], "amount": [8.5]}, schema=SCHEMA))
    assert main(["sync-catalog", "--path", flat.meta.base_path, "--metastore", hms.uri, "--database", "cow"]) == 0
    assert presto_catalog_properties(hms.uri) in capsys.readouterr().out  # the CLI prints the catalog file
    expected = _rows(flat.read().to_pylist())
    assert expected == [(7, 1, "x", 7.0), (8, 2, "y", 8.5)]
    assert _each_catalog(presto, "SELECT id, ts, city, amount FROM cow.flat") == {name: expected for name in CATALOGS}
