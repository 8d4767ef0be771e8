"""Durable, group-committed appends to WAL files.

One :class:`GroupCommitter` serves every WAL file of a table server; one :class:`WalWriter`
appends to one WAL file from any number of threads: a block file (version-1 blocks resumed
after recovery, tests), or a segment of a table's WAL stream (:mod:`memtier.wal.stream`,
which queues a write's frames as one append and waits for it after releasing its locks:
:class:`PendingAppend`).

Group commit is leader/follower per file. An append encodes its frame outside any lock,
queues it (which fixes its offset), and then either becomes the leader (no commit is
running) or parks on its own gate. The leader writes every queued frame in one vectored
write and syncs it (one fdatasync / hsync / PUT), then opens exactly the gates of the
appends that commit covered and, if appends remain, hands the lead to the oldest of them.
So one writer writes and syncs its own frame with no thread hand-off, N writers share one
write and one sync per round, and every follower is woken once: a broadcast would wake all
N each round, and with the GIL every extra wake-up costs the CPU the appends need. Locks
are never held during a sync. Before it commits, a leader waits briefly for the appends the
previous commit released (see :meth:`WalWriter._gather_group`). Different files have their
own leaders, so their syncs run at the same time and the kernel folds them into one
journal commit.

A failed write or sync leaves the file in an unknown state (a failed fsync cannot be
retried safely): the writer fails every unacknowledged and later append with
:class:`WalWriteFailedError`, and the block must continue in a new WAL after recovery.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from memtier import failpoints
from memtier.config import SyncPolicy, WalConfig
from memtier.errors import FencedError, InvalidArgumentError, WalClosedError, WalWriteFailedError
from memtier.io import FileIO
from memtier.latency import LatencyWindow
from memtier.wal.format import (
    WalContents,
    WalHeader,
    WalSeal,
    encode_frame,
    encode_header,
    encode_seal,
)
from memtier.wal.storage import WalSink, wal_storage

__all__ = ["CommitStats", "FrameLocation", "GroupCommitter", "PendingAppend", "WalWriter"]


@dataclass(frozen=True)
class CommitStats:
    """Counters of one writer, or of all writers of a :class:`GroupCommitter`."""

    appends: int
    syncs: int  # durable syncs issued: one fdatasync / hsync / PUT of one file each
    bytes: int  # bytes appended

    def __add__(self, other: CommitStats) -> CommitStats:
        return CommitStats(
            self.appends + other.appends, self.syncs + other.syncs, self.bytes + other.bytes
        )


@dataclass(frozen=True)
class FrameLocation:
    """Where an appended frame lies in its WAL."""

    offset: int
    length: int

    @property
    def end(self) -> int:
        return self.offset + self.length


class GroupCommitter:
    """Sync policy and counters shared by every WAL writer of one table server.

    With :attr:`SyncPolicy.INTERVAL` it runs the background thread that syncs all of its
    open writers every ``sync_interval``.
    """

    def __init__(
        self, config: WalConfig | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self.config = config or WalConfig()
        self.clock = clock
        policy = self.config.sync_policy
        #: Seconds a sync waits before it starts, so more appends join it.
        self.window = (
            self.config.group_window.total_seconds() if policy is SyncPolicy.GROUP_WINDOW else 0.0
        )
        #: Whether an append returns only once durable.
        self.wait_for_sync = policy is not SyncPolicy.INTERVAL
        self._lock = threading.Lock()
        #: How long each durable sync (group commit) took.
        self.sync_latency = LatencyWindow()
        self._writers: weakref.WeakSet[WalWriter] = weakref.WeakSet()
        self._retired = CommitStats(0, 0, 0)  # counts of writers already released
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if policy is SyncPolicy.INTERVAL:
            self._thread = threading.Thread(
                target=self._sync_periodically, name="wal-sync", daemon=True
            )
            self._thread.start()

    def stats(self) -> CommitStats:
        with self._lock:
            return sum((w.stats() for w in self._writers), self._retired)

    def close(self) -> None:
        """Stop the background sync after a last sync of every open writer."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sync_all()

    def __enter__(self) -> GroupCommitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _register(self, writer: WalWriter) -> None:
        with self._lock:
            self._writers.add(writer)

    def _retire(self, writer: WalWriter) -> None:
        with self._lock:
            if writer in self._writers:
                self._writers.discard(writer)
                self._retired += writer.stats()

    def _sync_all(self) -> None:
        with self._lock:
            writers = list(self._writers)
        for writer in writers:
            with contextlib.suppress(WalWriteFailedError):  # its appenders were told
                writer.sync()

    def _sync_periodically(self) -> None:
        interval = self.config.sync_interval.total_seconds()
        while not self._stop.wait(interval):
            self._sync_all()


class _Gate:
    """Where one follower parks until the leader covers its ``end`` or hands it the lead."""

    __slots__ = ("_lock", "end", "lead")

    def __init__(self, end: int) -> None:
        self.end = end
        self.lead = False
        self._lock = threading.Lock()
        self._lock.acquire()

    def wait(self, timeout: float = -1) -> None:
        self._lock.acquire(timeout=timeout)

    def open(self, lead: bool = False) -> None:
        self.lead = lead
        self._lock.release()


_LEADER = _Gate(-1)  # what :meth:`WalWriter._publish` returns to the thread that leads

#: How long, as a fraction of a recent group commit, a leader waits for its group to gather.
GATHER_FRACTION = 0.5


class PendingAppend:
    """Frames queued on a WAL and not yet known durable. :meth:`wait` must be called once,
    by the thread that queued them: it makes them durable (leading the group commit, or
    sharing another's). Others may ask :meth:`durable` meanwhile."""

    def __init__(self, writer: WalWriter, location: FrameLocation, gate: _Gate | None) -> None:
        self._writer = writer
        self.location = location
        self._gate = gate
        self._done = threading.Event()
        self._error: BaseException | None = None

    def wait(self) -> None:
        """Return once durable (or written, with INTERVAL); WalWriteFailedError if not."""
        writer, end = self._writer, self.location.end
        try:
            if not writer._committer.wait_for_sync:
                with writer._failing(end):
                    writer._write_queued()  # acknowledged once written, synced later
                    writer._before_ack()
            writer._await(end, self._gate)
        except BaseException as e:
            self._error = e
            raise
        finally:
            self._done.set()

    def durable(self) -> bool:
        """Whether the frames were made durable, waiting for :meth:`wait` to finish."""
        if not self._done.is_set():  # (a flush asks this of every frame: no lock once done)
            self._done.wait()
        return self._error is None

    def failed(self) -> bool:
        """Whether :meth:`wait` finished without making the frames durable (no waiting)."""
        return self._done.is_set() and self._error is not None


class WalWriter:
    """Appends frames to one block's WAL; thread-safe.

    Create with :meth:`create` (a new block) or :meth:`resume` (an unsealed block after
    recovery). ``append`` returns once the frame is durable (per the committer's policy),
    ``seal`` closes the block for good, ``close`` only releases the file.
    """

    def __init__(
        self,
        path: str,
        header: WalHeader,
        sink: WalSink,
        committer: GroupCommitter,
        *,
        size: int,
        frames: int = 0,
        rows: int = 0,
    ) -> None:
        self.path = path
        self.header = header
        self._sink = sink
        self._committer = committer
        # Taken in this order: ``_write_lock`` serializes writes to the sink and is held
        # during them; ``_lock`` guards the state below and is never held during I/O.
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        self._queue: list[Any] = []  # buffers of queued records, not yet written
        self._reserved = size  # end of the last queued record
        self._durable = size  # bytes a completed sync covers
        self._leading = False  # a leader is syncing
        self._gates: list[_Gate] = []  # parked followers, by ``end``
        self._group = 1  # appends the last sync covered: the size of the next group
        self._grouped = 0  # appends covered by the last sync and the ones before
        self._commit_seconds = 0.0  # moving average of one group commit (write + sync)
        self._gather: _Gate | None = None  # a leader waiting for its group to fill
        self._gather_missing = 0
        self._frames = frames
        self._rows = rows
        self._appends = self._syncs = self._bytes = 0
        self._closed: str | None = None  # "sealed" / "closed" once no append is accepted
        self._failure: BaseException | None = None
        committer._register(self)

    @classmethod
    def create(
        cls, fileio: FileIO, path: str, header: WalHeader, committer: GroupCommitter
    ) -> WalWriter:
        """Start a new WAL at ``path``; its header is durable on return."""
        storage = wal_storage(fileio, path)
        data = encode_header(header)
        return cls(path, header, storage.create_sink(data), committer, size=len(data))

    @classmethod
    def resume(cls, fileio: FileIO, recovered: WalContents, committer: GroupCommitter) -> WalWriter:
        """Continue appending to an unsealed WAL that :func:`~memtier.wal.replay.recover` read."""
        if recovered.sealed:
            raise WalClosedError(f"{recovered.path} is sealed; a sealed block takes no appends")
        if recovered.tail:
            raise InvalidArgumentError(f"{recovered.path} has a torn tail: recover() it first")
        sink = wal_storage(fileio, recovered.path).open_sink()
        return cls(
            recovered.path,
            recovered.header,
            sink,
            committer,
            size=recovered.size,
            frames=len(recovered.frames),
            rows=recovered.row_count,
        )

    # -- state ----------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Bytes appended so far, durable or not."""
        return self._reserved

    @property
    def durable_size(self) -> int:
        """Bytes known durable: what readers of the live block may safely read."""
        return self._durable

    @property
    def frame_count(self) -> int:
        return self._frames

    @property
    def sealed(self) -> bool:
        return self._closed == "sealed"

    @property
    def failure(self) -> BaseException | None:
        """What failed the writer (it takes no more appends), or None."""
        return self._failure

    @property
    def reopened(self) -> bool:
        """Whether a failed sync had the store open the file again and carry on (HDFS):
        still good, but better not appended to much longer."""
        return self._sink.reopened()

    def stats(self) -> CommitStats:
        """This file's share of its committer's counters."""
        return CommitStats(self._appends, self._syncs, self._bytes)

    # -- appending ------------------------------------------------------------------------
    def append(
        self,
        batch: pa.RecordBatch,
        *,
        txn_id: int,
        producer_id: bytes,
        producer_seq: int,
    ) -> FrameLocation:
        """Append one frame; returns once it is durable (or written, with INTERVAL)."""
        record, payload = encode_frame(
            self.header,
            batch,
            txn_id=txn_id,
            producer_id=producer_id,
            producer_seq=producer_seq,
            sync_mark=self._durable,
        )
        return self._append_parts((record, payload), batch.num_rows)

    def _append_parts(self, parts: tuple[Any, ...], rows: int) -> FrameLocation:
        """Queue the buffers of one frame (and what must precede it) as one run of bytes;
        returns once durable (or written, with INTERVAL)."""
        pending = self._queue_append(parts, rows, 1)
        pending.wait()
        return pending.location

    def _queue_append(self, parts: tuple[Any, ...], rows: int, frames: int) -> PendingAppend:
        """Queue the buffers of ``frames`` frames (and what must precede them) as one run
        of bytes, as one append; the caller must :meth:`PendingAppend.wait` for it."""
        length = sum(memoryview(p).nbytes for p in parts)
        with self._lock:
            offset = self._enqueue(parts, length)
            self._frames += frames
            self._rows += rows
            self._appends += 1
            if self._gather is not None:
                self._gather_missing -= 1
                if self._gather_missing <= 0:
                    self._gather.open()
                    self._gather = None
            gate = self._publish(offset + length)
        return PendingAppend(self, FrameLocation(offset, length), gate)

    def sync(self) -> int:
        """Make every append so far durable; returns the durable size."""
        with self._lock:
            end = self._reserved
            gate = self._publish(end, force=True)
        self._await(end, gate)
        return end

    def seal(self) -> WalSeal:
        """Append the seal record durably and close: the block takes no more appends."""
        with self._lock:
            seal = WalSeal(self._frames, self._rows, int(self._committer.clock() * 1000))
            record = encode_seal(self.header, seal, sync_mark=self._durable)
            offset = self._enqueue((record,), len(record))
            self._closed = "sealed"
            gate = self._publish(offset + len(record), force=True)
        self._await(offset + len(record), gate)
        self._release()
        return seal

    def close(self) -> None:
        """Sync what was appended and release the file, leaving the block unsealed."""
        with self._lock:
            if self._closed is not None:
                return
            self._closed = "closed"
        try:
            if self._failure is None:
                self.sync()
        finally:
            self._release()

    def __enter__(self) -> WalWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------
    def _enqueue(self, parts: tuple[Any, ...], length: int) -> int:
        """Queue one record at the end (holding ``_lock``); returns its offset."""
        if self._closed is not None:
            raise WalClosedError(f"{self.path}: the WAL is {self._closed}")
        if self._failure is not None:
            raise self._failed_error(self._reserved)
        offset = self._reserved
        self._queue.extend(parts)
        self._reserved = offset + length
        self._bytes += length
        return offset

    def _write_queued(self) -> int:
        """Write every queued record in one vectored write; returns the end written."""
        with self._write_lock:
            with self._lock:
                parts, self._queue = self._queue, []
                end = self._reserved
            if parts:
                self._sink.write(parts)
        return end

    @contextlib.contextmanager
    def _failing(self, end: int) -> Iterator[None]:
        """Any error inside fails the writer: after a failed write (maybe partial) or sync
        the file is in an unknown state, so nothing may follow."""
        try:
            yield
        except BaseException as e:
            with self._lock:
                self._fail(e)
            if not isinstance(e, Exception):
                raise
            raise self._failed_error(end) from e

    def _publish(self, end: int, *, force: bool = False) -> _Gate | None:
        """This thread's part in making ``end`` durable (holding ``_lock``): :data:`_LEADER`
        to lead, a gate to park on, or None when there is nothing to wait for."""
        if not (force or self._committer.wait_for_sync) or self._durable >= end:
            return None
        if self._failure is not None:
            raise self._failed_error(end) from self._failure
        if not self._leading:
            self._leading = True
            return _LEADER
        gate = _Gate(end)
        if self._gates and self._gates[-1].end > end:  # only sync() comes out of order
            bisect.insort(self._gates, gate, key=lambda g: g.end)
        else:
            self._gates.append(gate)
        return gate

    def _await(self, end: int, gate: _Gate | None) -> None:
        """Park on ``gate`` (until covered, or told to lead) or lead, until ``end`` is durable."""
        if gate is None:
            return
        if gate is not _LEADER:
            gate.wait()
            if not gate.lead:
                if self._durable < end:
                    raise self._failed_error(end) from self._failure
                return
        self._lead(end)

    def _lead(self, end: int) -> None:
        """One group commit as the leader, then pass the lead on. ``end`` was queued
        before this starts, so the commit covers it."""
        if self._committer.window:
            time.sleep(self._committer.window)  # let more appends join this commit
        elif self._committer.wait_for_sync:
            self._gather_group()
        appends = self._appends
        started = time.perf_counter()
        with self._failing(end):
            target = self._write_queued()
            failpoints.hit(failpoints.BEFORE_SYNC)
            synced = self._sink.sync()
            self._before_ack()
        elapsed = time.perf_counter() - started
        self._committer.sync_latency.add(elapsed)
        self._commit_seconds += 0.2 * (elapsed - self._commit_seconds)
        with self._lock:
            self._syncs += synced
            self._durable = max(self._durable, target)
            self._group, self._grouped = appends - self._grouped, appends
            covered = 0
            while covered < len(self._gates) and self._gates[covered].end <= self._durable:
                covered += 1
            done, self._gates = self._gates[:covered], self._gates[covered:]
            if self._gates:  # the next leader first: the next sync waits for no one
                self._gates.pop(0).open(lead=True)
            else:
                self._leading = False
            for gate in done:
                gate.open()

    def _gather_group(self) -> None:
        """Give the appends the last commit released a moment to come back, so one commit
        carries the whole group: without it N busy writers split into two halves that take
        turns, each commit carrying half of them (measured: 7 instead of 13 of 16 writers).
        One writer never waits; a group that does not come back costs at most half a
        commit, once."""
        if self._group <= max(1, self._appends - self._grouped):
            return  # one writer, or the group is complete (checked again under the lock)
        with self._lock:
            missing = self._group - (self._appends - self._grouped)
            if missing <= 0:
                return
            gate = self._gather = _Gate(0)
            self._gather_missing = missing
        gate.wait(timeout=GATHER_FRACTION * self._commit_seconds)
        with self._lock:
            self._gather = None

    def _before_ack(self) -> None:
        """Called once what is queued is durable (written, with INTERVAL), before any of
        it is acknowledged: raising fails the writer, and every append it covers and
        every later one gets the error. Here nothing; a stream segment refuses once its
        life is fenced (:mod:`memtier.wal.fence`)."""

    def _fail(self, error: BaseException) -> None:
        """Fail the writer (holding ``_lock``), end the lead and wake every follower."""
        self._failure = error
        self._leading = False
        for gate in self._gates:
            gate.open()
        self._gates.clear()

    def _failed_error(self, offset: int) -> WalWriteFailedError | FencedError:
        if isinstance(self._failure, FencedError):  # not a storage failure: the owner is gone
            return FencedError(f"{self.path}: the append ending at byte {offset} was refused: {self._failure}")
        return WalWriteFailedError(
            f"{self.path}: the append ending at byte {offset} may not be durable; the WAL "
            f"failed and takes no more appends: {self._failure!r}"
        )

    def _release(self) -> None:
        try:
            with contextlib.suppress(WalWriteFailedError, FencedError):  # failed: no sync starts any more
                self.sync()  # waits out a sync another thread may still run on the file
        finally:
            self._committer._retire(self)
            self._sink.close()
