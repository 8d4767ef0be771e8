"""Spark SQL by name over a Hive Metastore: memtier registers its tables in a real Hive
Metastore, and Apache Hudi 1.0.2 on Spark 3.5 (``spark.sql.catalogImplementation=hive``)
queries them by name: ``name_ro`` read-optimized, ``name_rt`` the snapshot, as memtier
reads them. The metastore is Hive 3.1.3: Spark 3.5's built-in Hive 2.3 client calls
``get_table``, which Hive 4's metastore no longer serves."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from memtier.catalog import sync_table
from memtier.hudi import HudiTable
from tests.support.hms import HiveMetastoreServer
from tests.support.hudi_spark import HudiSpark

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("amount", pa.float64())])
COLUMNS = ["id", "ts", "city", "amount"]
SELECT = "SELECT id, ts, city, amount FROM {}"


@pytest.fixture(scope="module")
def spark_sql(hms: HiveMetastoreServer) -> Iterator[HudiSpark]:
    """Hudi on Spark whose SQL catalog is the metastore."""
    with HudiSpark(conf={"spark.sql.catalogImplementation": "hive",
                         "spark.hadoop.hive.metastore.uris": hms.uri}) as spark:
        yield spark


def _memtier(table: pa.Table) -> list[tuple[str, ...]]:
    """memtier's rows as Spark's SQL answers come back (strings)."""
    return sorted(tuple(str(r[c]) for c in COLUMNS) for r in table.select(COLUMNS).to_pylist())


def _spark(spark: HudiSpark, sql: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.sql(sql))


def test_spark_sql_finds_synced_tables_by_name(spark_sql: HudiSpark, hms: HiveMetastoreServer, tmp_path) -> None:
    orders = HudiTable.create(str(tmp_path / "orders"), SCHEMA, record_key="id", ordering_field="ts",
                              partition_fields="city", buckets=2)
    orders.write(pa.table({"id": [1, 2, 3, 4], "ts": [1, 1, 1, 1], "city": ["oslo", "rome", "oslo", "rome"],
                           "amount": [10.0, 20.0, 30.0, 40.0]}, schema=SCHEMA))
    orders.write(pa.table({"id": [1, 5], "ts": [2, 1], "city": ["oslo", "lima"], "amount": [11.0, 50.0]},
                          schema=SCHEMA))  # id 1 updated in a log file; city=lima a new partition
    orders.write(pa.table({"id": [2], "city": ["rome"]}), operation="delete")
    flat = HudiTable.create(str(tmp_path / "flat"), SCHEMA, record_key="id", ordering_field="ts", buckets=1,
                            table_type="COPY_ON_WRITE")
    flat.write(pa.table({"id": [7, 8], "ts": [1, 1], "city": ["x", "y"], "amount": [7.0, 8.0]}, schema=SCHEMA))
    for table, name in ((orders, "orders"), (flat, "flat")):
        sync_table(table.meta, hms.handle(), database="sales", name=name)

    read_optimized = _memtier(orders.read(mode="read_optimized"))
    snapshot = _memtier(orders.read())
    assert read_optimized != snapshot
    assert _spark(spark_sql, SELECT.format("sales.orders_ro")) == read_optimized
    assert _spark(spark_sql, SELECT.format("sales.orders_rt")) == snapshot
    assert _spark(spark_sql, SELECT.format("sales.orders_rt") + " WHERE city = 'oslo'") == [
        r for r in snapshot if r[2] == "oslo"]
    assert _spark(spark_sql, SELECT.format("sales.orders_rt") + " WHERE id = 1") == [("1", "2", "oslo", "11.0")]
    assert _spark(spark_sql, SELECT.format("sales.flat")) == _memtier(flat.read())
    assert _spark(spark_sql, "SHOW TABLES IN sales") == sorted(
        ("sales", name, "False") for name in ("flat", "orders_ro", "orders_rt"))
