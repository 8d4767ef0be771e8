"""Catalog sync through a cluster: the master registers every table and keeps its
partitions current as flushes write new ones; ``client.sync_catalog`` and
``memtier sync-catalog`` sync on demand. (Trino reading the result: tests/interop.)"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from memtier.catalog import FileMetastore
from memtier.cli import main
from memtier.config import CatalogConfig, check, load
from memtier.errors import InvalidArgumentError, MetastoreError
from tests.support.inprocess import InProcessCluster
from tests.support.rpccluster import RpcCluster

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.float64())])


def _batch(ids: list[int], city: str, ts: int = 1) -> pa.Table:
    return pa.table({"id": ids, "ts": [ts] * len(ids), "city": [city] * len(ids), "v": [1.0] * len(ids)},
                    schema=SCHEMA)


@pytest.fixture
def synced(tmp_path: Path) -> Iterator[InProcessCluster]:
    cluster = InProcessCluster(str(tmp_path / "root"), catalog={
        "catalog.file-metastore": str(tmp_path / "ms"), "catalog.database": "lake"})
    cluster.add_server("ts-0")
    yield cluster
    cluster.close()


def test_the_master_registers_tables_and_each_new_partition_a_flush_writes(synced, tmp_path) -> None:
    client = synced.client()
    client.create_table("orders", SCHEMA, record_key="id", ordering_field="ts", partition_fields="city", buckets=2)
    metastore = FileMetastore(str(tmp_path / "ms"))
    assert metastore.partition_names("lake", "orders_ro") == set()  # registered, no partition yet
    assert (tmp_path / "ms" / "lake" / "orders_rt" / ".trinoSchema").exists()

    client.write("orders", _batch([1, 2], "oslo"))
    client.flush("orders")
    assert metastore.partition_names("lake", "orders_ro") == {"city=oslo"}
    client.write("orders", _batch([3], "rome"))
    client.write("orders", _batch([1], "oslo", ts=2))
    client.flush("orders")
    assert metastore.partition_names("lake", "orders_ro") == {"city=oslo", "city=rome"}
    assert metastore.partition_names("lake", "orders_rt") == {"city=oslo", "city=rome"}

    synced.restart_master()  # a new master syncs what it serves again: nothing changes
    before = sorted(p.stat().st_mtime_ns for p in (tmp_path / "ms").rglob(".trinoSchema"))
    synced.client().write("orders", _batch([4], "lima"))
    synced.client().flush("orders")
    assert metastore.partition_names("lake", "orders_ro") == {"city=oslo", "city=rome", "city=lima"}
    after = sorted(p.stat().st_mtime_ns for p in (tmp_path / "ms").rglob(".trinoSchema"))
    assert len(after) == len(before) + 2 and set(before) <= set(after)  # only the new partition's files

    synced.client().drop_table("orders", purge=True)
    assert not (tmp_path / "ms" / "lake" / "orders_ro").exists()


def test_sync_catalog_on_demand_into_another_metastore(synced, tmp_path) -> None:
    client = synced.client()
    client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", partition_fields="city", buckets=1)
    client.write("t", _batch([1], "oslo"))
    client.flush("t")
    result = client.sync_catalog("t", str(tmp_path / "other"), "sales")
    assert result["tables"] == ["t_ro", "t_rt"] and result["partitions"] == ["city=oslo"]
    assert result["partitions_added"] == 2 and result["database"] == "sales"
    assert client.sync_catalog("t", str(tmp_path / "other"), "sales")["partitions_added"] == 0


def test_without_a_metastore_the_error_says_how_to_give_one(tmp_path) -> None:
    cluster = InProcessCluster(str(tmp_path))
    cluster.add_server("ts-0")
    client = cluster.client()
    client.create_table("t", SCHEMA, record_key="id", buckets=1)
    with pytest.raises(InvalidArgumentError, match="catalog.file-metastore"):
        client.sync_catalog("t")
    cluster.close()


def test_a_failing_sync_never_fails_a_flush_and_the_next_one_registers_all_it_missed(tmp_path) -> None:
    ms = tmp_path / "ms"
    cluster = InProcessCluster(str(tmp_path / "root"), catalog={"catalog.file-metastore": str(ms)})
    cluster.add_server("ts-0")
    cluster.master.catalog.retry_after_s = 0.0  # no pause between attempts (30 s by default)
    client = cluster.client()
    client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", partition_fields="city", buckets=1)
    client.write("t", _batch([1, 2], "oslo"))
    client.flush("t")
    shutil.rmtree(ms / "default" / "t_ro")
    (ms / "default" / "t_ro").write_text("in the way")  # registering t_ro's partitions now fails
    client.write("t", _batch([3], "rome"))
    assert client.flush("t")
    assert client.read("t").num_rows == 3
    (ms / "default" / "t_ro").unlink()  # the metastore is back: the next commit syncs the whole table,
    client.write("t", _batch([1], "oslo", ts=2))  # though it writes only into a partition synced before
    client.flush("t")
    assert FileMetastore(str(ms)).partition_names("default", "t_ro") == {"city=oslo", "city=rome"}
    cluster.close()


def test_catalog_settings_are_checked() -> None:
    check({"catalog.file-metastore": "/tmp/ms", "catalog.database": "lake"})
    check({"catalog.hive-metastore": "thrift://hms:9083"})
    with pytest.raises(InvalidArgumentError, match="catalog.metastore"):
        check({"catalog.metastore": "/tmp/ms"})
    with pytest.raises(InvalidArgumentError, match="catalog.file-metastore or catalog.hive-metastore, not both"):
        load(CatalogConfig, {"catalog.file-metastore": "/tmp/ms", "catalog.hive-metastore": "thrift://hms:9083"})
    with pytest.raises(InvalidArgumentError, match="'hms:9083' must be a thrift://host:port"):
        load(CatalogConfig, {"catalog.hive-metastore": "hms:9083"})


def test_a_cluster_whose_hive_metastore_is_unreachable_still_flushes_and_sync_names_it(tmp_path) -> None:
    cluster = InProcessCluster(str(tmp_path / "root"), catalog={"catalog.hive-metastore": "thrift://127.0.0.1:1"})
    cluster.add_server("ts-0")
    try:
        client = cluster.client()
        client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", partition_fields="city", buckets=1)
        client.write("t", _batch([1, 2], "oslo"))
        assert client.flush("t")
        assert client.read("t").num_rows == 2
        with pytest.raises(MetastoreError, match=r"thrift://127\.0\.0\.1:1 is unreachable"):
            client.sync_catalog("t")
    finally:
        cluster.close()


def test_memtier_sync_catalog_against_a_cluster_and_by_path(tmp_path, capsys) -> None:
    cluster = RpcCluster(str(tmp_path / "root"))
    cluster.add_server("ts-0")
    try:
        client = cluster.client()
        for name in ("a", "b"):
            client.create_table(name, SCHEMA, record_key="id", ordering_field="ts", partition_fields="city",
                                buckets=1)
            client.write(name, _batch([1], "oslo"))
            client.flush(name)
        ms = tmp_path / "ms"
        assert main(["sync-catalog", "--address", cluster.address, "--metastore", str(ms)]) == 0
        out = capsys.readouterr().out
        assert "default.a_ro / a_rt: 1 partitions (2 registered now)" in out
        assert "default.b_ro / b_rt" in out
        assert f"hive.metastore.catalog.dir=local://{ms}\n" in out
        assert json.loads((ms / "default" / "b_rt" / "city=oslo" / ".trinoSchema").read_text())

        table_path = client.describe("a")["path"]
        assert main(["sync-catalog", "--path", table_path, "--name", "copy", "--metastore", str(ms),
                     "--database", "lake"]) == 0
        assert "lake.copy_ro / copy_rt: 1 partitions (2 registered now)" in capsys.readouterr().out
    finally:
        cluster.close()


@pytest.mark.parametrize("argv", [
    ["sync-catalog", "--path", "/nowhere"],  # --path without --metastore
    ["sync-catalog", "t", "--path", "/nowhere", "--metastore", "/tmp/ms"],  # both at once
])
def test_memtier_sync_catalog_usage_errors(argv: list[str], capsys) -> None:
    assert main(argv) == 2
    assert "memtier sync-catalog: error:" in capsys.readouterr().err


def test_a_table_synced_again_from_another_location_registers_its_partitions_there(tmp_path) -> None:
    """A table of the same name re-created at another path (dropped and created again, say)
    and synced: its partitions are registered under the new location, not left pointing
    into the old one (Trino refuses that: "Partition location does not belong to
    base-location")."""
    from memtier.catalog import sync_table
    from memtier.hudi import HudiTable

    metastore = FileMetastore(str(tmp_path / "ms"))
    locations = {}
    for where in ("first", "second"):
        table = HudiTable.create(str(tmp_path / where / "orders"), SCHEMA, record_key="id", ordering_field="ts",
                                 partition_fields="city", buckets=2)
        table.write(pa.table({"id": [1, 2], "ts": [1, 1], "city": ["oslo", "rome"], "v": [1.0, 2.0]},
                             schema=SCHEMA))
        result = sync_table(table.meta, metastore, name="orders")
        locations[where] = metastore.location(table.meta.base_path)
    assert result.partitions_added == 4  # both partitions of both tables, again
    for name in ("orders_ro", "orders_rt"):
        for partition in ("city=oslo", "city=rome"):
            document = json.loads((tmp_path / "ms" / "default" / name / partition / ".trinoSchema").read_text())
            assert document["externalLocation"] == f"{locations['second']}/{partition}"
