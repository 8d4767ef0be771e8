"""Flushes off the write path: a table server's flushes are built, encoded and written by
a worker process it owns. Killing that process (SIGKILL) mid-flush loses nothing
acknowledged: the flush is rolled back, its blocks flush again through a new worker."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import pyarrow as pa
import pytest

from memtier.client import Transaction
from memtier.config import FlushWorker, TableServerConfig
from memtier.errors import CommitFailedError
from memtier.hudi.filenames import LogFile, classify
from memtier.hudi.tablemeta import TableMeta
from memtier.io import open_fileio
from memtier.tableserver.flush import WalRows
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.inprocess import InProcessCluster
from tests.support.waiting import wait_until

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("name", pa.string())])
ROWS = 300_000


@pytest.fixture
def cluster(tmp_path) -> Iterator[InProcessCluster]:
    c = InProcessCluster(str(tmp_path), config=TableServerConfig(flush_worker=FlushWorker.PROCESS))
    c.add_server("ts-0")
    c.client().create_table("t", SCHEMA, record_key="id", ordering_field="ts", buckets=2)
    yield c
    c.close()


def _batch(start: int, n: int, ts: int) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table({"id": ids, "ts": np.full(n, ts), "name": pa.array([f"n{ts}"] * n)}, schema=SCHEMA)


def _path(c: InProcessCluster) -> str:
    return os.path.join(c.root, "tables", "t")


def _meta(c: InProcessCluster) -> TableMeta:
    return TableMeta.load(open_fileio(_path(c)), _path(c))


def _data_files(c: InProcessCluster) -> set[str]:
    return {n for n in os.listdir(_path(c)) if classify(n) is not None}


def _hoodie(c: InProcessCluster) -> list[str]:
    return os.listdir(os.path.join(_path(c), ".hoodie"))


def test_flushes_run_in_a_worker_process_the_table_server_owns(cluster) -> None:
    client = cluster.client()
    client.write("t", _batch(0, 1000, 1))
    client.flush("t")
    client.write("t", _batch(500, 1000, 2))
    client.flush("t")
    worker = cluster.servers["ts-0"].flusher.pid
    assert worker is not None and worker != os.getpid()
    assert int(open(f"/proc/{worker}/stat").read().rsplit(")", 1)[1].split()[1]) == os.getpid()
    expected = rows(client.read("t"))
    assert len(expected) == 1500
    assert rows(hudi_rs_read(_path(cluster))) == expected
    logs = [f for f in map(classify, os.listdir(_path(cluster))) if isinstance(f, LogFile)]
    assert logs, "the second flush wrote log files"
    cluster.servers["ts-0"].close()
    wait_until(lambda: not os.path.exists(f"/proc/{worker}") or _zombie(worker), "the worker to exit")


def _zombie(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _flush_killing_the_worker_once_planned(cluster: InProcessCluster, worker: int) -> object:
    """Flush; SIGKILL the flush worker as soon as the flush's instant is inflight (its
    files named, being written). What the flush returned or raised."""
    before = {n for n in _hoodie(cluster) if n.endswith(".deltacommit.inflight")}
    outcome: list[object] = []

    def flush() -> None:
        try:
            outcome.append(cluster.client().flush("t"))
        except CommitFailedError as e:
            outcome.append(e)

    thread = threading.Thread(target=flush)
    thread.start()
    wait_until(lambda: outcome or {n for n in _hoodie(cluster) if n.endswith(".deltacommit.inflight")} - before,
               "the flush to be planned (its instant inflight)", timeout=30)
    os.kill(worker, signal.SIGKILL)
    thread.join(60)
    return outcome[0]


def test_a_flush_worker_killed_mid_flush_loses_nothing_and_the_next_flush_succeeds(cluster) -> None:
    client = cluster.client()
    server = cluster.servers["ts-0"]
    client.write("t", _batch(0, 1000, 0))
    client.flush("t")  # the worker is running; the file groups exist (next flushes write logs)
    killed = 0
    for attempt in range(1, 6):
        client.write("t", _batch(attempt * 1000, ROWS, attempt))
        expected = rows(client.read("t"))
        worker = server.flusher.pid
        files = _data_files(cluster)
        outcome = _flush_killing_the_worker_once_planned(cluster, worker)
        assert rows(client.read("t")) == expected  # every acknowledged row, whatever happened
        if isinstance(outcome, CommitFailedError):
            killed += 1
            assert "died mid-flush" in str(outcome)
            assert _meta(cluster).timeline().pending(None) == ()
            assert _data_files(cluster) == files  # what the worker wrote is gone
            assert [n for n in _hoodie(cluster) if n.endswith(".rollback")]
            assert len(client.flush("t")) == 1  # a new worker flushes the same blocks
            assert server.flusher.pid not in (None, worker)
        assert rows(client.read("t")) == expected
        assert rows(hudi_rs_read(_path(cluster))) == expected
        if killed >= 2:
            break
    assert killed, "no kill landed while a flush was running"


def test_a_flush_worker_killed_between_flushes_is_replaced(cluster) -> None:
    client = cluster.client()
    client.write("t", _batch(0, 100, 1))
    client.flush("t")
    server = cluster.servers["ts-0"]
    worker = server.flusher.pid
    os.kill(worker, signal.SIGKILL)
    wait_until(lambda: server.flusher.pid is None, "the worker to die")
    client.write("t", _batch(50, 100, 2))
    assert len(client.flush("t")) == 1
    assert server.flusher.pid not in (None, worker)
    assert rows(hudi_rs_read(_path(cluster))) == rows(client.read("t"))


def test_a_hung_flush_worker_is_killed_at_the_deadline_and_flushing_resumes(tmp_path) -> None:
    # long enough for a live worker's flush on a loaded machine, short enough for a test
    config = TableServerConfig(flush_worker=FlushWorker.PROCESS, flush_timeout=timedelta(seconds=10))
    cluster = InProcessCluster(str(tmp_path), config=config)
    server = cluster.add_server("ts-0")
    client = cluster.client()
    client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", buckets=2)
    try:
        client.write("t", _batch(0, 1000, 1))
        client.flush("t")
        worker = server.flusher.pid
        os.kill(worker, signal.SIGSTOP)  # alive, but never answers (a flush's rows fill its pipe)
        client.write("t", _batch(500, 20_000, 2))
        expected = rows(client.read("t"))
        files = _data_files(cluster)
        with pytest.raises(CommitFailedError, match="did not answer within 10 s and was killed"):
            server.flush("t", seal=True)
        assert _zombie(worker), "the hung worker is gone"
        assert _meta(cluster).timeline().pending(None) == ()  # its flush rolled back
        assert _data_files(cluster) == files
        assert rows(client.read("t")) == expected  # every acknowledged row, still served
        assert len(client.flush("t")) == 1  # a new worker flushes the same blocks
        assert server.flusher.pid not in (None, worker)
        assert rows(hudi_rs_read(_path(cluster))) == expected
    finally:
        cluster.close()


def test_the_worker_reads_a_flush_s_rows_from_the_wal_committed_frames_only(cluster) -> None:
    """The table server hands the worker where the rows lie in the WAL stream, not the
    rows: evicted blocks are not read back by the server, and frames of a transaction still
    open stay out of the flush."""
    client = cluster.client()
    server = cluster.servers["ts-0"]
    client.write("t", _batch(0, 2000, 1))
    tx = Transaction(client, "t", "open")
    tx.write(_batch(5000, 10, 1))
    client.write("t", _batch(1000, 2000, 2))
    t = server._table("t")
    for group in t.groups.values():
        with group.lock:
            group.seal_open()
    assert server.evict() > 0
    assert all(not b.resident for g in t.groups.values() for b in g.blocks)
    snapshot = cluster.master.txn_snapshot()
    placed = [server._rows(t, t.meta, g, g.unflushed(), snapshot)[1] for g in t.groups.values()]
    assert all(isinstance(p, WalRows) for p in placed)
    assert sum(p.num_rows for p in placed) == 4000  # every committed row written, none of the open ones
    tx.abort()  # its blocks can flush now, without its rows
    assert client.flush("t")
    assert all(not b.resident for g in t.groups.values() for b in g.blocks if b.flushed_instant)
    assert rows(hudi_rs_read(_path(cluster))) == rows(client.read("t", mode="committed"))
    assert len(rows(client.read("t", mode="committed"))) == 3000
