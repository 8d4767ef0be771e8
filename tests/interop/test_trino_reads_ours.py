"""Interop out, Trino: a real Trino server (its Hudi connector, over the file metastore
memtier's catalog sync writes) reads the tables memtier writes."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from memtier.catalog import sync_table
from memtier.hudi import HudiTable
from tests.support.inprocess import InProcessCluster
from tests.support.model import TableModel
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


# == random upsert/delete histories, then the table services and the write tier ==========

WORKLOAD = pa.schema([("k", pa.int64()), ("o", pa.int64()), ("part", pa.string()), ("v", pa.string())])
WORKLOAD_COLUMNS = WORKLOAD.names


def _workload_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in WORKLOAD_COLUMNS) for r in rows)


def _random_history(rng: random.Random, table: HudiTable, model: TableModel, commits: int) -> None:
    """Upserts (random ordering values, so late records lose) and deletes, as Hudi commits."""
    for commit in range(1, commits + 1):
        if commit > 1 and rng.random() < 0.3:
            keys = sorted(rng.sample(range(40), 5))
            table.write(pa.table({"k": keys, "part": [f"p{k % 3}" for k in keys]}), operation="delete")
            model.delete(commit, [{"k": k, "part": f"p{k % 3}"} for k in keys])
        else:
            batch = [{"k": k, "o": rng.randint(0, 5), "part": f"p{k % 3}", "v": f"c{commit}-{k}"}
                     for k in rng.sample(range(40), 15)]
            table.write(pa.Table.from_pylist(batch, schema=WORKLOAD))
            model.upsert(commit, batch)


@pytest.mark.parametrize(("seed", "log_blocks"), [(1, "avro"), (2, "parquet"), (3, "avro")])
def test_trino_reads_random_histories_as_memtier_and_the_model_do(
    trino: TrinoServer, tmp_path, seed: int, log_blocks: str,
) -> None:
    rng = random.Random(seed)
    path = str(tmp_path / "t")
    table = HudiTable.create(path, WORKLOAD, record_key="k", ordering_field="o", partition_fields="part",
                             buckets=2, log_block_format=log_blocks)
    model = TableModel(("k",), "o", ("part",), buckets=2)
    _random_history(rng, table, model, commits=8)

    schema = f"history{seed}"
    cluster = InProcessCluster(str(tmp_path / "root"), catalog={
        "catalog.file-metastore": trino.metastore, "catalog.database": schema})
    cluster.add_server("ts-0")
    try:
        client = cluster.client()
        client.register_table("t", path)  # the master registers t_ro, t_rt and their partitions
        select = f"SELECT k, o, part, v FROM {schema}.{{}}"

        def trino_rows(sql: str) -> list[tuple[Any, ...]]:
            return sorted(tuple(r) for r in trino.query(sql))

        snapshot = _workload_rows(model.rows())
        assert _workload_rows(client.read("t").to_pylist()) == snapshot
        read_optimized = _workload_rows(client.read("t", mode="read_optimized").to_pylist())
        assert read_optimized != snapshot  # updates and deletes wait in log files
        assert trino_rows(select.format("t_ro")) == read_optimized
        assert trino_rows(select.format("t_rt")) == read_optimized  # Trino 476: base files only

        cluster.run_service("t")  # the log files become base files: now Trino sees every row
        assert trino_rows(select.format("t_ro")) == snapshot
        assert trino_rows(select.format("t_rt")) == snapshot
        for part in ("p0", "p1", "p2"):
            assert trino_rows(select.format("t_ro") + f" WHERE part = '{part}'") == [
                r for r in snapshot if r[2] == part]
        keys = sorted(rng.sample(range(40), 6))
        assert trino_rows(select.format("t_ro") + f" WHERE k IN ({', '.join(map(str, keys))})") == [
            r for r in snapshot if r[0] in keys]
        assert trino_rows(select.format("t_ro") + " WHERE k BETWEEN 10 AND 20 AND part <> 'p0'") == [
            r for r in snapshot if 10 <= r[0] <= 20 and r[2] != "p0"]

        # through the write tier: a new partition (the master registers it at the flush) and
        # updates of compacted rows (in log files until the next compaction)
        fresh = [{"k": k, "o": 9, "part": "p9", "v": "fresh"} for k in (100, 101)]
        late = [{"k": r[0], "o": 9, "part": r[2], "v": "late"} for r in snapshot[:3]]
        client.write("t", pa.Table.from_pylist(fresh + late, schema=WORKLOAD))
        client.flush("t")
        now = _workload_rows(client.read("t").to_pylist())
        assert trino_rows(select.format("t_ro")) == _workload_rows(
            client.read("t", mode="read_optimized").to_pylist())
        assert trino_rows(select.format("t_ro") + " WHERE part = 'p9'") == _workload_rows(fresh)
        cluster.run_service("t")
        assert trino_rows(select.format("t_ro")) == now
    finally:
        cluster.close()
