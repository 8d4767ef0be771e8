"""Catalog sync without an engine: Hive types, partition names, the file-metastore layout
Trino reads, and that syncing again writes only what changed."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from memtier.catalog import (
    FileMetastore,
    open_metastore,
    presto_catalog_properties,
    sync_table,
    trino_catalog_properties,
    trino_location,
)
from memtier.catalog.hivemetastore import HiveMetastore, hive_location
from memtier.catalog.hivetypes import escape_path_name, hive_type
from memtier.errors import InvalidArgumentError, MetastoreError, UnsupportedTableError
from memtier.hudi import HudiTable

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("amount", pa.float64())])


@pytest.mark.parametrize(("arrow", "hive"), [
    (pa.int32(), "int"), (pa.int64(), "bigint"), (pa.float64(), "double"), (pa.string(), "string"),
    (pa.bool_(), "boolean"), (pa.date32(), "date"), (pa.timestamp("us", tz="UTC"), "timestamp"),
    (pa.decimal128(10, 2), "decimal(10,2)"), (pa.list_(pa.string()), "array<string>"),
    (pa.map_(pa.string(), pa.int32()), "map<string,int>"),
    (pa.struct([("city", pa.string()), ("zip", pa.int32())]), "struct<city:string,zip:int>"),
])
def test_hive_types(arrow: pa.DataType, hive: str) -> None:
    assert hive_type(arrow) == hive


def test_a_type_without_a_hive_name_is_refused_naming_the_column() -> None:
    with pytest.raises(UnsupportedTableError, match="'clock'"):
        hive_type(pa.time64("us"), "clock")


def test_partition_values_are_escaped_as_hive_does() -> None:
    assert escape_path_name("a/b=c:d%") == "a%2Fb%3Dc%3Ad%25"
    assert escape_path_name("oslo") == "oslo"


def test_locations_and_catalog_file(tmp_path) -> None:
    assert trino_location("/data/t") == "local:///data/t"
    assert trino_location("file:///data/t") == "local:///data/t"
    assert trino_location("s3://bucket/t") == "s3://bucket/t"
    assert trino_location("s3a://bucket/t") == "s3://bucket/t"
    text = trino_catalog_properties(str(tmp_path / "ms"))
    assert f"hive.metastore.catalog.dir=local://{tmp_path}/ms\n" in text
    assert "connector.name=hudi\n" in text


def test_hive_metastore_locations_catalog_file_and_uri() -> None:
    assert hive_location("/data/t") == "file:/data/t"
    assert hive_location("file:///data/t") == "file:/data/t"
    assert hive_location("s3a://bucket/t") == "s3a://bucket/t"
    text = trino_catalog_properties("thrift://hms:9083")
    assert "connector.name=hudi\nhive.metastore.uri=thrift://hms:9083\n" in text
    assert isinstance(open_metastore("thrift://hms:9083"), HiveMetastore)
    for bad in ("thrift://hms", "thrift://:9083", "thrift://hms:9083/db"):
        with pytest.raises(InvalidArgumentError, match="must be thrift://host:port"):
            HiveMetastore(bad)


def test_presto_catalog_files_over_a_hive_metastore_only() -> None:
    assert presto_catalog_properties("thrift://hms:9083") == "connector.name=hudi\nhive.metastore.uri=thrift://hms:9083\n"
    assert presto_catalog_properties("thrift://hms:9083", "hive-hadoop2").splitlines() == [
        "connector.name=hive-hadoop2", "hive.metastore.uri=thrift://hms:9083", "hive.parquet.use-column-names=true"]
    with pytest.raises(InvalidArgumentError, match="through a Hive Metastore"):
        presto_catalog_properties("/srv/metastore")
    with pytest.raises(InvalidArgumentError, match="no Presto connector 'iceberg'"):
        presto_catalog_properties("thrift://hms:9083", "iceberg")


def test_an_unreachable_hive_metastore_is_named_and_nothing_is_written(tmp_path) -> None:
    table = _table(tmp_path)
    with pytest.raises(MetastoreError, match=r"Hive Metastore thrift://127\.0\.0\.1:1 is unreachable .* create database"):
        sync_table(table.meta, HiveMetastore("thrift://127.0.0.1:1"))


def _table(tmp_path, table_type: str = "MERGE_ON_READ") -> HudiTable:
    table = HudiTable.create(str(tmp_path / "orders"), SCHEMA, record_key="id", ordering_field="ts",
                             partition_fields="city", buckets=2, table_type=table_type)
    table.write(pa.table({"id": [1, 2], "ts": [1, 1], "city": ["oslo", "a:b"], "amount": [1.0, 2.0]},
                         schema=SCHEMA))
    return table


def test_sync_writes_the_file_metastore_layout(tmp_path) -> None:
    table = _table(tmp_path)
    ms = tmp_path / "ms"
    result = sync_table(table.meta, FileMetastore(str(ms)), database="sales", name="Orders")
    assert result.tables == ["orders_ro", "orders_rt"] and result.partitions_added == 4
    assert (ms / ".sales.trinoSchema").exists()
    ro = json.loads((ms / "sales" / "orders_ro" / ".trinoSchema").read_text())
    assert ro["tableType"] == "EXTERNAL_TABLE"
    assert ro["externalLocation"] == f"local://{tmp_path}/orders"
    assert ro["originalStorageFormat"]["inputFormat"] == "org.apache.hudi.hadoop.HoodieParquetInputFormat"
    assert [c["name"] for c in ro["dataColumns"]][:1] == ["_hoodie_commit_time"]
    assert [c["name"] for c in ro["dataColumns"]][-3:] == ["id", "ts", "amount"]
    assert ro["partitionColumns"] == [{"name": "city", "type": "string", "properties": {}}]
    rt = json.loads((ms / "sales" / "orders_rt" / ".trinoSchema").read_text())
    assert rt["originalStorageFormat"]["inputFormat"].endswith("realtime.HoodieParquetRealtimeInputFormat")
    part = json.loads((ms / "sales" / "orders_ro" / "city=oslo" / ".trinoSchema").read_text())
    assert part["externalLocation"] == f"local://{tmp_path}/orders/city=oslo"
    assert (ms / "sales" / "orders_ro" / "city=a%3Ab" / ".trinoSchema").exists()


def test_sync_again_adds_only_new_partitions(tmp_path) -> None:
    table = _table(tmp_path)
    metastore = FileMetastore(str(tmp_path / "ms"))
    sync_table(table.meta, metastore)
    assert sync_table(table.meta, metastore).partitions_added == 0
    table.write(pa.table({"id": [3], "ts": [1], "city": ["rome"], "amount": [3.0]}, schema=SCHEMA))
    again = sync_table(table.meta, metastore)
    assert again.written == [] and again.partitions_added == 2
    assert metastore.partition_names("default", "orders_rt") == {"city=oslo", "city=a%3Ab", "city=rome"}


def test_a_schema_change_rewrites_the_columns_of_the_table_and_its_partitions(tmp_path) -> None:
    """As Hudi's hive-sync alters a table with CASCADE, a file metastore's partitions take
    the new columns too."""
    table = _table(tmp_path)
    metastore = FileMetastore(str(tmp_path / "ms"))
    sync_table(table.meta, metastore)
    evolved = SCHEMA.append(pa.field("note", pa.string())).set(3, pa.field("amount", pa.float64()))
    again = sync_table(table.meta.with_schema(evolved, 1), metastore)
    assert again.written == ["orders_ro", "orders_rt"] and again.partitions_added == 0
    for name in ("orders_ro", "orders_rt"):
        definition = json.loads((tmp_path / "ms" / "default" / name / ".trinoSchema").read_text())
        assert [c["name"] for c in definition["dataColumns"]][-2:] == ["amount", "note"]
        for partition in metastore.partition_names("default", name):
            document = json.loads((tmp_path / "ms" / "default" / name / partition / ".trinoSchema").read_text())
            assert document["columns"] == definition["dataColumns"]


def test_copy_on_write_is_one_table(tmp_path) -> None:
    table = _table(tmp_path, "COPY_ON_WRITE")
    assert sync_table(table.meta, FileMetastore(str(tmp_path / "ms"))).tables == ["orders"]


def test_bad_database_name_is_refused_before_anything_is_written(tmp_path) -> None:
    table = _table(tmp_path)
    with pytest.raises(InvalidArgumentError, match="database name 'Sales'"):
        sync_table(table.meta, FileMetastore(str(tmp_path / "ms")), database="Sales")
    assert not (tmp_path / "ms").exists()
