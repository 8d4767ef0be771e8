"""A block lists where its frames lie in the WAL stream for a flush: taken whole when every
append is confirmed and every transaction kept, frame by frame otherwise (an open
transaction's frames left out), resident or evicted alike, and always the same frames
the WAL reads back."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import pyarrow as pa
import pytest

from memtier.client import Transaction
from memtier.tableserver.block import Block
from memtier.tableserver.server import TableServer
from memtier.wal import read_frames
from tests.support.inprocess import InProcessCluster

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64())])


@pytest.fixture
def cluster() -> Iterator[InProcessCluster]:
    root = tempfile.mkdtemp(prefix="memtier-places-")
    cluster = InProcessCluster(root)
    try:
        yield cluster
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


def _rows(ids: list[int], ts: int) -> pa.Table:
    return pa.table({"id": ids, "ts": [ts] * len(ids)}, schema=SCHEMA)


def _block(server: TableServer) -> Block:
    (group,) = server._table("t").groups.values()
    (block,) = group.blocks
    return block


def _listed(server: TableServer, block: Block, keep: object) -> tuple[list[int], int]:
    placed = block.wal_frames(keep)  # type: ignore[arg-type]
    assert placed is not None
    places, rows = placed
    frames = read_frames(server._wal_io, places.refs(), block.header.schema)
    return [v for f in frames for v in f.batch.column("ts").to_pylist()], rows


def test_every_frame_taken_whole_or_one_by_one_lists_the_same_frames(cluster: InProcessCluster) -> None:
    server = cluster.add_server("a")
    client = cluster.client()
    client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", buckets=1)
    for ts in range(3):
        client.write("t", _rows([1, 2], ts))
    tx = Transaction(client, "t", "open-one")
    tx.write(_rows([3], 10))
    block = _block(server)
    assert block._unconfirmed == 0  # each write confirmed its frame once durable

    assert _listed(server, block, lambda txn: True) == ([0, 0, 1, 1, 2, 2, 10], 7)  # whole
    committed = cluster.master.txn_snapshot().committed
    assert _listed(server, block, committed) == ([0, 0, 1, 1, 2, 2], 6)  # the open transaction left out

    block.seal()
    assert server.evict() > 0 and not block.resident
    assert _listed(server, block, lambda txn: True) == ([0, 0, 1, 1, 2, 2, 10], 7)
    assert _listed(server, block, committed) == ([0, 0, 1, 1, 2, 2], 6)
    tx.abort()
    client.close()


def test_an_append_not_confirmed_yet_is_asked_frame_by_frame(cluster: InProcessCluster) -> None:
    server = cluster.add_server("a")
    client = cluster.client()
    client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", buckets=1)
    client.write("t", _rows([1], 0))
    block = _block(server)
    with block._lock:  # as while the write that added it still waits for its sync
        block._unconfirmed += 1
    assert _listed(server, block, lambda txn: True) == ([0], 1)  # durable: listed by asking it
    client.close()
