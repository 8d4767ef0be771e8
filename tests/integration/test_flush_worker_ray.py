"""Flush workers on real Ray actors: each table server flushes through a child process of
its own; SIGKILL of that process, or of the table server itself, during a write stream
with flushes loses no acknowledged row, fails no writer, and leaves no process behind; a
flush held up longer than the heartbeat timeout does not get the table server declared
dead."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from memtier.hudi import HudiTable
from memtier.io import join
from tests.support.hudirs import hudi_rs_read
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ray = pytest.importorskip("ray")

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("name", pa.string())])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    import memtier

    root = tmp_path_factory.mktemp("memtier-flush-worker")
    running = memtier.start_local(str(root), table_servers=1, config={
        "services.workers": "0", "tableserver.flush-interval": "100ms", "tableserver.block-max-age": "100ms",
    })
    yield running
    running.shutdown()


def _worker_pid(cluster: object) -> int | None:
    return cluster.flush_worker_pid("ts-0")  # type: ignore[attr-defined]


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


class _Stream:
    """Writes batches of fresh keys from a thread, recording each acknowledged key."""

    def __init__(self, client: object, table: str) -> None:
        self.acked: list[int] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(client, table))
        self._thread.start()

    def _run(self, client: object, table: str) -> None:
        start = 0
        try:
            while not self._stop.is_set():
                ids = np.arange(start, start + 2000)
                client.write(table, pa.table({"id": ids, "ts": np.ones(len(ids), dtype=np.int64),  # type: ignore[attr-defined]
                                              "name": pa.array([f"n{start}"] * len(ids))}, schema=SCHEMA))
                self.acked.extend(ids.tolist())
                start += len(ids)
        except BaseException as e:  # surfaced by the test
            self.errors.append(e)

    def wait_for(self, more: int) -> None:
        target = len(self.acked) + more
        wait_until(lambda: len(self.acked) >= target or self.errors, f"{more} more acknowledged rows")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)
        assert not self.errors, self.errors


def _table(cluster: object) -> tuple[str, str]:
    client = cluster.client()  # type: ignore[attr-defined]
    name = f"fw_{uuid.uuid4().hex[:6]}"
    path = join(cluster.path, "tables", name)  # type: ignore[attr-defined]
    client.create_table(name, SCHEMA, record_key="id", ordering_field="ts", buckets=2, path=path)
    return name, path


def _check_nothing_lost(cluster: object, table: str, path: str, acked: list[int]) -> None:
    client = cluster.client()  # type: ignore[attr-defined]
    keys = client.read(table, columns=["id"]).column("id").to_pylist()
    assert len(keys) == len(set(keys)), "a key appears twice"
    assert set(acked) <= set(keys), f"{len(set(acked) - set(keys))} acknowledged rows lost"
    client.flush(table)
    flushed = hudi_rs_read(path).column("id").to_pylist()
    assert len(flushed) == len(set(flushed)) and set(acked) <= set(flushed)


def test_a_table_server_flushes_through_a_child_process_of_its_own(cluster: object) -> None:
    client = cluster.client()  # type: ignore[attr-defined]
    table, path = _table(cluster)
    client.write(table, pa.table({"id": [1, 2], "ts": [1, 1], "name": ["a", "b"]}, schema=SCHEMA))
    client.flush(table)
    worker = _worker_pid(cluster)
    server = cluster.pids()["ts-0"]  # type: ignore[attr-defined]
    assert worker is not None and worker != server and _parent(worker) == server
    assert hudi_rs_read(path).num_rows == 2


def test_sigkill_of_the_flush_worker_during_writes_loses_nothing_and_a_new_one_takes_over(cluster: object) -> None:
    table, path = _table(cluster)
    stream = _Stream(cluster.client(), table)  # type: ignore[attr-defined]
    stream.wait_for(20_000)
    wait_until(lambda: _worker_pid(cluster) is not None, "a flush worker")
    worker = _worker_pid(cluster)
    os.kill(worker, signal.SIGKILL)
    stream.wait_for(20_000)
    wait_until(lambda: _worker_pid(cluster) not in (None, worker), "flushes to go on through a new worker")
    stream.stop()
    _check_nothing_lost(cluster, table, path, stream.acked)


def test_sigkill_of_the_table_server_ends_its_flush_worker_and_loses_nothing(cluster: object) -> None:
    table, path = _table(cluster)
    stream = _Stream(cluster.client(), table)  # type: ignore[attr-defined]
    stream.wait_for(20_000)
    wait_until(lambda: _worker_pid(cluster) is not None, "a flush worker")
    worker = _worker_pid(cluster)
    server = cluster.pids()["ts-0"]  # type: ignore[attr-defined]
    os.kill(server, signal.SIGKILL)
    wait_until(lambda: _gone(worker), "the dead table server's flush worker to exit", timeout=10)
    wait_until(lambda: cluster.pids()["ts-0"] != server, "ts-0 to restart")  # type: ignore[attr-defined]
    stream.wait_for(20_000)
    stream.stop()
    _check_nothing_lost(cluster, table, path, stream.acked)


def test_a_flush_stuck_longer_than_the_heartbeat_timeout_does_not_make_the_table_server_dead(
    cluster: object,
) -> None:
    from memtier.master.service import MasterProxy

    client = cluster.client()  # type: ignore[attr-defined]
    table, path = _table(cluster)
    client.write(table, pa.table({"id": [0], "ts": [1], "name": ["a"]}, schema=SCHEMA))
    client.flush(table)
    worker = _worker_pid(cluster)
    master = MasterProxy(cluster.address)  # type: ignore[attr-defined]
    os.kill(worker, signal.SIGSTOP)  # the next periodic flush waits on it
    try:
        deadline = time.monotonic() + 7.0  # beyond the 5 s heartbeat timeout
        key = 1
        while time.monotonic() < deadline:
            client.write(table, pa.table({"id": [key], "ts": [1], "name": ["b"]}, schema=SCHEMA))
            assert "ts-0" in master.servers(), "the master took the busy table server for dead"
            key += 1
            time.sleep(0.25)
    finally:
        os.kill(worker, signal.SIGCONT)
    wait_until(lambda: HudiTable.open(path).read(columns=["id"]).num_rows == key, "the held flush to complete")
