"""Trino reads memtier's tables on a real HDFS: the table's files on ``hdfs://`` (written
through memtier's HdfsFileIO), registered in a file metastore by memtier's catalog sync
with their ``hdfs://`` locations, read by Trino's Hudi connector through its HDFS file
system (``fs.hadoop.enabled``)."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest

from memtier.catalog import FileMetastore, sync_table, trino_catalog_properties
from tests.support.hdfs import HdfsCluster
from tests.support.orders import COLUMNS, write_orders
from tests.support.trino import TrinoServer

pytestmark = [pytest.mark.slow, pytest.mark.hdfs]



def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in COLUMNS) for r in table.select(COLUMNS).to_pylist())


def test_trino_reads_a_table_on_hdfs(trino: TrinoServer, hdfs: HdfsCluster, tmp_path) -> None:
    path = hdfs.url("trino", uuid.uuid4().hex, "orders")
    table = write_orders(path, hdfs.storage_options)
    metastore = tmp_path / "metastore"
    result = sync_table(table.meta, FileMetastore(str(metastore)), name="orders")
    assert result.partitions == ["city=lima", "city=oslo", "city=rome"]
    properties = trino_catalog_properties(str(metastore)) + "fs.hadoop.enabled=true\n"
    with trino.catalog("onhdfs", properties):
        read_optimized = _rows(table.read(mode="read_optimized"))
        assert (1, 1, "oslo", 10.0) in read_optimized  # the update waits in a log file
        found = sorted(tuple(r) for r in trino.query("SELECT id, ts, city, amount FROM orders_ro", catalog="onhdfs"))
        assert found == read_optimized
