"""Interop out, Trino: a real Trino server (its Hudi connector, over the file metastore
memtier's catalog sync writes) reads the tables memtier writes."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from memtier.catalog import sync_table
from memtier.hudi import HudiTable
from tests.support.trino import TrinoServer

pytestmark = pytest.mark.slow

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("amount", pa.float64())])
COLUMNS = ["id", "ts", "city", "amount"]


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in COLUMNS) for r in table.select(COLUMNS).to_pylist())


def _trino(trino: TrinoServer, sql: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in trino.query(sql))


def test_trino_reads_the_read_optimized_view_of_a_synced_table(trino: TrinoServer, tmp_path) -> None:
    table = HudiTable.create(str(tmp_path / "orders"), SCHEMA, record_key="id", ordering_field="ts",
                             partition_fields="city", buckets=2)
    table.write(pa.table({"id": [1, 2, 3, 4], "ts": [1, 1, 1, 1], "city": ["oslo", "rome", "oslo", "rome"],
                          "amount": [10.0, 20.0, 30.0, 40.0]}, schema=SCHEMA))
    table.write(pa.table({"id": [1, 5], "ts": [2, 1], "city": ["oslo", "lima"], "amount": [11.0, 50.0]},
                         schema=SCHEMA))  # id 1 into a log file; city=lima is a new partition
    result = sync_table(table.meta, trino.metastore_handle(), name="orders")
    assert result.tables == ["orders_ro", "orders_rt"]
    assert result.partitions == ["city=lima", "city=oslo", "city=rome"]

    read_optimized = _rows(table.read(mode="read_optimized"))
    assert (1, 1, "oslo", 10.0) in read_optimized  # the update is in a log file
    select = "SELECT id, ts, city, amount FROM {}"
    assert _trino(trino, select.format("orders_ro")) == read_optimized
    # Trino 476's Hudi connector reads the base files of a merge-on-read table for _rt too
    assert _trino(trino, select.format("orders_rt")) == read_optimized
    assert _trino(trino, select.format("orders_ro") + " WHERE city = 'rome'") == [
        r for r in read_optimized if r[2] == "rome"]
    assert _trino(trino, select.format("orders_ro") + " WHERE id = 3") == [(3, 1, "oslo", 30.0)]

    again = sync_table(table.meta, trino.metastore_handle(), name="orders")
    assert again.written == [] and again.partitions_added == 0
