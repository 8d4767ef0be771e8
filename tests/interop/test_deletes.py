"""Deletes through the write tier, flushed as Hudi delete blocks with their ordering
values: memtier and hudi-rs decide a delete against an upsert of the same key alike, in
memory and across flushes (out-of-order ones included), and compaction drops them."""

from __future__ import annotations

import pyarrow as pa

from memtier.compaction.worker import ServiceWorker
from memtier.io import join
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.inprocess import InProcessCluster

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("v", pa.string())])
COLUMNS = SCHEMA.names


def upsert(ids: list[int], ts: int, v: str) -> pa.Table:
    return pa.table({"id": ids, "ts": [ts] * len(ids), "v": [v] * len(ids)}, schema=SCHEMA)


def test_the_ordering_value_decides_between_a_delete_and_an_upsert(tmp_path) -> None:
    root = str(tmp_path)
    cluster = InProcessCluster(root)
    cluster.add_server("ts-0")
    client = cluster.client()
    path = join(root, "t")
    try:
        client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", buckets=2, path=path)
        client.write("t", upsert([1, 2, 3, 4, 5, 6], 10, "base"))
        client.flush("t")  # base files
        client.delete("t", {"id": [1], "ts": [5]})  # older than the version it meets: loses
        client.delete("t", {"id": [2], "ts": [15]})  # newer: the key is gone
        client.delete("t", [3])  # no ordering value: deletes what came before it
        client.write("t", pa.table({"id": [4, 5], "ts": [20, 20], "v": [None, "upsert"],
                                    "_hoodie_is_deleted": [True, False]}))
        expected = [(1, 10, "base"), (5, 20, "upsert"), (6, 10, "base")]
        assert rows(client.read("t"), COLUMNS) == expected
        client.flush("t")  # delete blocks with the ordering values
        assert rows(client.read("t"), COLUMNS) == expected == rows(hudi_rs_read(path), COLUMNS)

        client.write("t", upsert([2, 4], 12, "late"))  # below the flushed deletes (15, 20): hidden
        client.write("t", upsert([3], 11, "again"))  # after a delete without ordering: back
        client.delete("t", {"id": [6], "ts": [9]})  # below the base version (10): loses
        expected = [(1, 10, "base"), (3, 11, "again"), (5, 20, "upsert"), (6, 10, "base")]
        assert rows(client.read("t"), COLUMNS) == expected
        client.flush("t")
        assert rows(client.read("t"), COLUMNS) == expected == rows(hudi_rs_read(path), COLUMNS)

        if cluster.master.schedule_service("t", "compaction") is not None:
            assert ServiceWorker("svc", cluster.master).run_once()["state"] == "completed"
        assert rows(client.read("t"), COLUMNS) == expected == rows(hudi_rs_read(path, "read_optimized"), COLUMNS)
    finally:
        cluster.close()


def test_deletes_in_a_transaction_show_to_committed_readers_at_commit(tmp_path) -> None:
    root = str(tmp_path)
    cluster = InProcessCluster(root)
    cluster.add_server("ts-0")
    client = cluster.client()
    try:
        client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", buckets=2, path=join(root, "t"))
        client.write("t", upsert([1, 2], 1, "a"))
        with client.transaction("t") as tx:
            tx.delete([1])
            assert rows(client.read("t"), COLUMNS) == [(2, 1, "a")]  # latest: at once
            assert rows(client.read("t", mode="committed"), COLUMNS) == [(1, 1, "a"), (2, 1, "a")]
        assert rows(client.read("t", mode="committed"), COLUMNS) == [(2, 1, "a")]
    finally:
        cluster.close()
