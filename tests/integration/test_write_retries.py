"""A write retried while its first attempt still waits for its WAL sync (the client timed
out: a stalled disk, a paused server) is acknowledged only once that first attempt is
durable, and is appended itself if that sync fails. Before, the retry was taken for held
at once: acknowledged while nothing was durable (a lookup right after missed it, found by
the chaos soak of issue 29), and lost for good when the first attempt's sync then failed."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from memtier import failpoints
from memtier.errors import WalWriteFailedError
from memtier.tableserver.server import TableServer
from memtier.tableserver.tables import WriteAck
from tests.support.acked import SCHEMA, batch
from tests.support.inprocess import InProcessCluster
from tests.support.waiting import in_thread

PRODUCER = b"r" * 16
ROWS = list(range(100))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TableServer]:
    cluster = InProcessCluster(str(tmp_path / "root"))
    try:
        ts = cluster.add_server("ts-0")
        cluster.master.create_table("t", SCHEMA, "id", ordering_field="ts", buckets=2)
        yield ts
    finally:
        cluster.close()


class HeldSync:
    """The next WAL sync held at :data:`failpoints.BEFORE_SYNC` until released, then
    going on (``fail``: failing as a full disk fails it)."""

    def __init__(self, fail: bool) -> None:
        self.entered, self.released, self.fail = threading.Event(), threading.Event(), fail
        failpoints.arm(failpoints.BEFORE_SYNC, self._hold)

    def _hold(self) -> None:
        self.entered.set()
        self.released.wait(30)
        if self.fail:
            raise OSError(errno.ENOSPC, "No space left on device")



def _write(server: TableServer, ts: int) -> Callable[[], WriteAck]:
    return lambda: server.write("t", batch(ROWS, ts), producer_id=PRODUCER, producer_seq=1)


def _read_ts(server: TableServer) -> set[int]:
    return set(server.read("t", as_of_instant=None).column("ts").to_pylist())


def test_a_retry_of_a_write_still_syncing_is_acknowledged_once_it_is_durable(server: TableServer) -> None:
    sync = HeldSync(fail=False)
    first, first_outcome = in_thread(_write(server, 1))
    assert sync.entered.wait(30), "the first attempt never reached its sync"
    retry, retry_outcome = in_thread(lambda: _acknowledged_after(server, sync))
    time.sleep(0.5)  # the retry reaches the held write meanwhile (a late one proves nothing, fails nothing)
    sync.released.set()
    first.join(30)
    retry.join(30)
    assert isinstance(first_outcome[0], WriteAck) and first_outcome[0].rows == len(ROWS)
    ack, released_when_acknowledged = retry_outcome[0]  # type: ignore[misc]
    assert (ack.rows, ack.duplicate_rows) == (0, len(ROWS)), "the retry is a duplicate of the first attempt"
    assert released_when_acknowledged, "the retry was acknowledged before the first attempt was durable"
    assert _read_ts(server) == {1}


def _acknowledged_after(server: TableServer, sync: HeldSync) -> tuple[WriteAck, bool]:
    ack = _write(server, 1)()
    return ack, sync.released.is_set()


def test_a_retry_of_a_write_whose_sync_fails_is_appended_itself(server: TableServer) -> None:
    sync = HeldSync(fail=True)
    first, first_outcome = in_thread(_write(server, 1))
    assert sync.entered.wait(30), "the first attempt never reached its sync"
    retry, retry_outcome = in_thread(_write(server, 1))
    time.sleep(0.5)  # the retry reaches the held write meanwhile (a late one proves nothing, fails nothing)
    sync.released.set()
    first.join(30)
    retry.join(30)
    assert isinstance(first_outcome[0], WalWriteFailedError), first_outcome
    ack = retry_outcome[0]
    assert isinstance(ack, WriteAck) and (ack.rows, ack.duplicate_rows) == (len(ROWS), 0), ack
    assert len(server.read("t", as_of_instant=None)) == len(ROWS), "the acknowledged retry is held"
