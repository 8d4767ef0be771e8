"""Interop out over a Hive Metastore: memtier registers its tables in a real Hive Metastore
(Apache Hive's standalone server 3.1.3 and 4.0.1, over Thrift) as Hudi's hive-sync does, and a real Trino,
its Hudi catalog set to ``hive.metastore.uri=thrift://...``, finds them by name."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from memtier.catalog import sync_table, trino_catalog_properties
from memtier.cli import main
from memtier.errors import InvalidArgumentError, MetastoreError
from memtier.hudi import HudiTable
from tests.support.hms import VERSIONS, HiveMetastoreServer, run_hms
from tests.support.inprocess import InProcessCluster
from tests.support.trino import TrinoServer

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("amount", pa.float64())])
COLUMNS = ["id", "ts", "city", "amount"]
CATALOG = "hms"


@pytest.fixture(scope="module", params=VERSIONS)
def hms(request: pytest.FixtureRequest) -> Iterator[HiveMetastoreServer]:
    """One metastore of each tested version (the module's tests run against each)."""
    with run_hms(request.param) as server:
        yield server


@pytest.fixture(scope="module")
def engine(trino: TrinoServer, hms: HiveMetastoreServer) -> Iterator[TrinoServer]:
    """The session's Trino with a catalog ``hms`` over this module's metastore."""
    with trino.catalog(CATALOG, trino_catalog_properties(hms.uri)):
        yield trino


def _rows(rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in COLUMNS) if isinstance(r, dict) else tuple(r) for r in rows)


def _query(engine: TrinoServer, sql: str) -> list[tuple[Any, ...]]:
    return _rows(engine.query(sql, catalog=CATALOG))


@contextlib.contextmanager
def _thrift(hms: HiveMetastoreServer) -> Iterator[Any]:
    """Hive's own Thrift client on the metastore, to look at (and meddle with) what it holds."""
    from pymetastore.hive_metastore import ThriftHiveMetastore
    from thrift.protocol.TBinaryProtocol import TBinaryProtocol
    from thrift.transport import TSocket, TTransport

    transport = TTransport.TBufferedTransport(TSocket.TSocket("127.0.0.1", hms.port))
    transport.open()
    try:
        yield ThriftHiveMetastore.Client(TBinaryProtocol(transport))
    finally:
        transport.close()


def _registered(client: Any, database: str, table: str) -> Any:
    from pymetastore.hive_metastore import ttypes

    return client.get_table_req(ttypes.GetTableRequest(dbName=database, tblName=table)).table


def test_trino_finds_synced_tables_by_name_partitioned_and_not(engine, hms, tmp_path) -> None:
    orders = HudiTable.create(str(tmp_path / "orders"), SCHEMA, record_key="id", ordering_field="ts",
                              partition_fields="city", buckets=2)
    orders.write(pa.table({"id": [1, 2, 3, 4], "ts": [1, 1, 1, 1], "city": ["oslo", "rome", "oslo", "rome"],
                           "amount": [10.0, 20.0, 30.0, 40.0]}, schema=SCHEMA))
    orders.write(pa.table({"id": [1, 5], "ts": [2, 1], "city": ["oslo", "lima"], "amount": [11.0, 50.0]},
                          schema=SCHEMA))  # id 1 into a log file; city=lima a new partition
    flat = HudiTable.create(str(tmp_path / "flat"), SCHEMA, record_key="id", ordering_field="ts", buckets=1,
                            table_type="COPY_ON_WRITE")
    flat.write(pa.table({"id": [7, 8], "ts": [1, 1], "city": ["x", "y"], "amount": [7.0, 8.0]}, schema=SCHEMA))

    metastore = hms.handle()
    result = sync_table(orders.meta, metastore, database="sales", name="orders")
    assert result.metastore == hms.uri and result.tables == ["orders_ro", "orders_rt"]
    assert result.partitions_added == 6  # three partitions, each of two tables
    assert sync_table(flat.meta, metastore, database="sales", name="flat").tables == ["flat"]

    with _thrift(hms) as client:  # as Hudi's hive-sync registers it
        table = _registered(client, "sales", "orders_rt")
        assert table.tableType == "EXTERNAL_TABLE" and table.parameters["spark.sql.sources.provider"] == "hudi"
        assert table.sd.inputFormat == "org.apache.hudi.hadoop.realtime.HoodieParquetRealtimeInputFormat"
        assert table.sd.outputFormat == "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
        assert table.sd.serdeInfo.serializationLib == "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
        assert table.sd.serdeInfo.parameters["path"] == f"file:{tmp_path}/orders" == table.sd.location
        assert [c.name for c in table.partitionKeys] == ["city"]
        assert sorted(client.get_partition_names("sales", "orders_ro", -1)) == ["city=lima", "city=oslo", "city=rome"]

    read_optimized = _rows(orders.read(mode="read_optimized").to_pylist())
    assert (1, 1, "oslo", 10.0) in read_optimized  # the update waits in a log file
    select = "SELECT id, ts, city, amount FROM sales.{}"
    assert _query(engine, select.format("orders_ro")) == read_optimized
    assert _query(engine, select.format("orders_rt")) == read_optimized  # Trino 476: base files
    assert _query(engine, select.format("orders_ro") + " WHERE city = 'rome'") == [
        r for r in read_optimized if r[2] == "rome"]
    assert _query(engine, select.format("orders_ro") + " WHERE id = 3 AND city = 'oslo'") == [(3, 1, "oslo", 30.0)]
    assert _query(engine, select.format("flat")) == _rows(flat.read(mode="read_optimized").to_pylist())
    assert _query(engine, select.format("flat") + " WHERE id = 8") == [(8, 1, "y", 8.0)]

    again = sync_table(orders.meta, metastore, database="sales", name="orders")
    assert again.written == [] and again.partitions_added == 0


def test_a_changed_definition_is_put_back_and_bad_input_writes_nothing(hms, tmp_path, capsys) -> None:
    table = HudiTable.create(str(tmp_path / "t"), SCHEMA, record_key="id", ordering_field="ts",
                             partition_fields="city", buckets=1, table_type="COPY_ON_WRITE")
    table.write(pa.table({"id": [1], "ts": [1], "city": ["oslo"], "amount": [1.0]}, schema=SCHEMA))
    metastore = hms.handle()
    sync_table(table.meta, metastore, database="fix")
    with _thrift(hms) as client:
        registered = _registered(client, "fix", "t")
        registered.sd.inputFormat = "org.apache.hadoop.mapred.TextInputFormat"  # someone else's edit
        registered.parameters["owner.note"] = "kept"
        client.alter_table("fix", "t", registered)
    assert sync_table(table.meta, metastore, database="fix").written == ["t"]
    with _thrift(hms) as client:
        registered = _registered(client, "fix", "t")
    assert registered.sd.inputFormat == "org.apache.hudi.hadoop.HoodieParquetInputFormat"
    assert registered.parameters["owner.note"] == "kept"
    assert sync_table(table.meta, metastore, database="fix").written == []
    assert main(["sync-catalog", "--path", table.meta.base_path, "--name", "copy", "--metastore", hms.uri,
                 "--database", "fix"]) == 0
    out = capsys.readouterr().out
    assert "fix.copy: 1 partitions (1 registered now)" in out and f"hive.metastore.uri={hms.uri}\n" in out

    with pytest.raises(InvalidArgumentError, match="table name 'a/b'"):
        sync_table(table.meta, metastore, database="never", name="a/b")
    with _thrift(hms) as client:
        assert "never" not in client.get_all_databases()


def test_a_kept_connection_outlives_a_metastore_restart(tmp_path) -> None:
    table = HudiTable.create(str(tmp_path / "t"), SCHEMA, record_key="id", ordering_field="ts",
                             partition_fields="city", buckets=1)
    table.write(pa.table({"id": [1], "ts": [1], "city": ["oslo"], "amount": [1.0]}, schema=SCHEMA))
    with run_hms() as first:  # its own metastore, to restart (one version: the newest)
        metastore = first.handle()
        assert sync_table(table.meta, metastore).partitions_added == 2
        port = first.port
    with run_hms(port=port):  # back (on a fresh database): the broken connection is replaced
        assert sync_table(table.meta, metastore).partitions_added == 2
        assert sync_table(table.meta, metastore).partitions_added == 0
    with pytest.raises(MetastoreError, match=f"thrift://127.0.0.1:{port} is unreachable"):
        sync_table(table.meta, metastore)
    metastore.close()


def test_the_master_keeps_the_metastore_current_as_flushes_add_partitions(engine, hms, tmp_path) -> None:
    cluster = InProcessCluster(str(tmp_path / "root"), catalog={
        "catalog.hive-metastore": hms.uri, "catalog.database": "live"})
    cluster.add_server("ts-0")
    try:
        client = cluster.client()
        client.create_table("events", SCHEMA, record_key="id", ordering_field="ts", partition_fields="city",
                            buckets=2)
        assert _query(engine, "SELECT count(*) FROM live.events_ro") == [(0,)]  # registered at create
        select = "SELECT id, ts, city, amount FROM live.events_ro"
        for step, city in enumerate(["oslo", "rome", "lima"]):
            client.write("events", pa.table({"id": [10 * step + i for i in range(3)], "ts": [1] * 3,
                                             "city": [city] * 3, "amount": [float(step)] * 3}, schema=SCHEMA))
            client.flush("events")  # a new partition: the master registers it at the commit
            assert _query(engine, select) == _rows(client.read("events", mode="read_optimized").to_pylist())
        client.write("events", pa.table({"id": [0, 10], "ts": [2, 2], "city": ["oslo", "rome"],
                                         "amount": [9.0, 9.0]}, schema=SCHEMA))
        client.flush("events")
        cluster.run_service("events")
        snapshot = _rows(client.read("events").to_pylist())
        assert (0, 2, "oslo", 9.0) in snapshot
        assert _query(engine, select) == snapshot
        assert _query(engine, select + " WHERE city = 'rome' AND id = 10") == [(10, 2, "rome", 9.0)]
        again = client.sync_catalog("events")  # on demand, into the configured metastore
        assert again["metastore"] == hms.uri and again["written"] == [] and again["partitions_added"] == 0
        client.drop_table("events", purge=True)
        assert "events_ro" not in [r[0] for r in engine.query("SHOW TABLES FROM live", catalog=CATALOG)]
    finally:
        cluster.close()

