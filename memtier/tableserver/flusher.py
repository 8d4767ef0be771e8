"""Where a table server's flushes run: in a worker process the table server owns (the
default), so that building, encoding and writing Hudi files never holds the interpreter
that acknowledges writes; or inline, in the table server's own process.

The worker is a child process (running :func:`main`) serving one
flush at a time over two pipes. A flush is two requests, as :class:`FlushJob` is two
steps: ``plan`` (a JSON header naming the table's schema the table server writes it under,
and, for each file group, where its rows lie in the WAL stream, which the worker reads
itself; only the rows of blocks of older versions, or written under an older schema,
follow as Arrow IPC streams; the reply names the files, for the master's inflight
instant) and
``write`` (the reply: the write stats of the files, written durably).

Nothing acknowledged depends on the worker. If it dies mid-flush, the table server sees
its pipe close: the flush fails, the master rolls the instant back (deleting any file the
worker wrote), the blocks stay unflushed in memory and WAL, and the next flush starts a
new worker. A worker that is alive but does not answer a request within the flush
timeout (hung, stopped, starved) is killed, and the same follows. If the table server
dies, the worker notices its parent gone and exits; the table server's successor
recovers the blocks from the WAL as after any crash. The worker may be pinned to CPUs of
its own (:mod:`memtier.placement`), away from the table server's.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any, Protocol
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa

from memtier.errors import CommitFailedError, MemtierError
from memtier.gcpauses import freeze_startup
from memtier.hudi.deletes import flagged_schema
from memtier.hudi.schema import decode_schema, encode_schema
from memtier.hudi.tablemeta import TableMeta
from memtier.io import FileIO, open_fileio, read_gently
from memtier.placement import pin
from memtier.rpc.codec import dumps, error_from_wire, error_to_wire, loads, table_from_ipc, table_to_ipc
from memtier.tableserver.flush import (
    FlushGroup,
    FlushJob,
    FlushRows,
    FramePlaces,
    Planned,
    WalRows,
    read_rows,
)
from memtier.tableserver.memory import return_freed_memory
from memtier.wal import FrameRef

__all__ = ["Flusher", "InlineFlusher", "ProcessFlusher"]

log = logging.getLogger(__name__)

#: How long closing waits for the worker to exit before killing it.
_EXIT_WAIT_S = 5.0
#: How often the worker checks that the table server that started it is still alive.
_PARENT_CHECK_S = 0.2
#: The buffer asked for the pipe that carries a flush's rows to the worker.
_PIPE_BYTES = 1 << 20
#: The worker process's program.
_WORKER_MAIN = "import sys; from memtier.tableserver.flusher import main; main(sys.argv[1:])"


class Flusher(Protocol):
    """Runs flushes: plan, ``planned`` told what will be written (before any file is),
    then write; the plan and the write stats."""

    def run(self, meta: TableMeta, instant: str, groups: Sequence[FlushGroup], rows: Sequence[FlushRows],
            planned: Callable[[Planned], None]) -> tuple[Planned, list[dict[str, Any]]]: ...

    @property
    def pid(self) -> int | None:
        """The process flushes run in, when it is not this one."""
        ...

    def close(self) -> None: ...


class InlineFlusher:
    """Flushes in this process; rows in the WAL are read from ``wal``."""

    pid = None

    def __init__(self, wal: FileIO) -> None:
        self._wal = wal

    def run(self, meta: TableMeta, instant: str, groups: Sequence[FlushGroup], rows: Sequence[FlushRows],
            planned: Callable[[Planned], None]) -> tuple[Planned, list[dict[str, Any]]]:
        schema = flagged_schema(meta.physical)
        tables = read_rows(self._wal, [r.places.refs() if isinstance(r, WalRows) else r for r in rows], schema)
        job = FlushJob(meta, instant, groups, tables)
        plan = job.plan()
        planned(plan)
        return plan, job.write()

    def close(self) -> None:
        pass


class _Worker:
    """One running worker process and the two ends of its pipes."""

    def __init__(self, cpus: frozenset[int] | None) -> None:
        request_r, self._request_w = os.pipe()
        _widen(self._request_w)
        self._reply_r, reply_w = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-c", _WORKER_MAIN, str(request_r), str(reply_w), str(os.getpid())],
            pass_fds=(request_r, reply_w), stdin=subprocess.DEVNULL,
        )
        os.close(request_r)
        os.close(reply_w)
        self.cpus = pin(cpus, self.process.pid)
        self.requests = Connection(self._request_w, readable=False)
        self.replies = Connection(self._reply_r, writable=False)
        self.broken = False  # its pipes failed: it is dead or dying
        self.hung = False  # it missed a deadline and was killed

    def call(self, header: dict[str, Any], tables: Sequence[pa.Table], timeout: float) -> Any:
        """Send a request, wait for its reply: the result, or the worker's error raised.
        A worker that has not answered within ``timeout`` seconds is killed (its pipes then
        fail the call). A dead worker raises :class:`CommitFailedError` (the flush failed,
        nothing of it is visible: safe to roll back and retry)."""
        watchdog = threading.Timer(timeout, self._kill_hung)
        watchdog.daemon = True
        watchdog.start()
        try:
            self.requests.send_bytes(dumps(header))
            for table in tables:
                self.requests.send_bytes(memoryview(table_to_ipc(table)))
            reply = self.replies.recv_bytes()
        except (EOFError, OSError) as e:
            self.broken = True
            self.process.kill()  # gone for sure: nothing it wrote changes after this, safe to roll back
            self.process.wait()
            what = f"did not answer within {timeout:g} s and was killed" if self.hung else "died mid-flush"
            raise CommitFailedError(
                f"the flush worker (pid {self.process.pid}) {what} ({type(e).__name__}: {e}); "
                "the flush is rolled back and its blocks flush again"
            ) from e
        finally:
            watchdog.cancel()
        message = loads(reply)
        if "error" in message:
            raise error_from_wire(reply)
        return message["result"]

    def _kill_hung(self) -> None:
        log.warning("flush worker (pid %d) did not answer in time; killing it", self.process.pid)
        self.hung = True
        self.process.kill()  # SIGKILL ends a stopped process too

    def alive(self) -> bool:
        return not self.broken and self.process.poll() is None

    def stop(self) -> None:
        """Close the pipes (the worker exits on its own), kill it if it does not."""
        self.requests.close()
        self.replies.close()
        try:
            self.process.wait(0 if self.broken else _EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class ProcessFlusher:
    """Flushes in a worker process, started by :meth:`start` or at the first flush, and
    again after it dies or misses the ``timeout`` (seconds) of a request; pinned to
    ``cpus`` if given; it reads rows from the WAL on ``wal``. Flushes go one at a time;
    tables or WALs on ``memory://`` (which lives in this process only) flush inline."""

    def __init__(self, timeout: float, wal: FileIO, *, cpus: frozenset[int] | None = None) -> None:
        self.timeout = timeout
        self._wal = wal
        self._cpus = cpus
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._inline = InlineFlusher(wal)

    def start(self) -> None:
        """Start the worker now, not at the first flush (its start-up, ~0.6 s of imports,
        then runs before writes stream in, not beside the first flush)."""
        with self._lock:
            self._running()

    @property
    def pid(self) -> int | None:
        """The worker's process id (None before it starts)."""
        worker = self._worker
        return worker.process.pid if worker is not None and worker.alive() else None

    @property
    def cpus(self) -> frozenset[int] | None:
        """The CPUs the worker runs on (None before the first flush)."""
        worker = self._worker
        return worker.cpus if worker is not None else None

    def run(self, meta: TableMeta, instant: str, groups: Sequence[FlushGroup], rows: Sequence[FlushRows],
            planned: Callable[[Planned], None]) -> tuple[Planned, list[dict[str, Any]]]:
        if "memory" in (urlsplit(meta.base_path).scheme, urlsplit(self._wal.root).scheme):
            return self._inline.run(meta, instant, groups, rows, planned)
        with self._lock:
            worker = self._running()
            try:
                result = worker.call({
                    "op": "plan", "path": meta.base_path, "storage_options": meta.io.storage_options,
                    "schema": encode_schema(meta.schema), "schema_version": meta.schema_version,
                    "wal": self._wal.root, "wal_options": self._wal.storage_options,
                    "instant": instant, "groups": [[g.partition, g.file_id, g.new] for g in groups],
                    "refs": [_refs(r) for r in rows],
                }, [r for r in rows if not isinstance(r, WalRows)], self.timeout)
                plan = Planned(result["metadata"], [(p, f) for p, f in result["file_groups"]])
                planned(plan)
                return plan, worker.call({"op": "write"}, (), self.timeout)
            except CommitFailedError:
                if not worker.alive():
                    worker.stop()
                    self._worker = None
                raise

    def _running(self) -> _Worker:
        if self._worker is not None and not self._worker.alive():
            log.warning("flush worker (pid %d) exited with %s; starting another",
                        self._worker.process.pid, self._worker.process.returncode)
            self._worker.stop()
            self._worker = None
        if self._worker is None:
            self._worker = _Worker(self._cpus)
        return self._worker

    def close(self) -> None:
        with self._lock:
            if self._worker is not None:
                self._worker.stop()
                self._worker = None


def _widen(fd: int) -> None:
    """Give the pipe ``fd`` 1 MiB of buffer where Linux allows (64 KiB by default): a
    flush's rows cross it in 16x fewer writes and wake-ups (a 64 MB round: 5,121 context
    switches and 16-19 ms of the table server's CPU measured before, 324 and 12 ms after)."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or above pipe-max-size
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)


def _refs(rows: FlushRows) -> dict[str, Any] | None:
    """Where ``rows`` lie in the WAL, as the worker's request carries it (None: sent as
    IPC): the segments, and each frame's segment, offset and length as int64 bytes
    (:class:`~memtier.tableserver.flush.FramePlaces`)."""
    if not isinstance(rows, WalRows):
        return None
    return {"segments": [[path, seed] for path, seed in rows.places.segments], "frames": rows.places.places.tobytes()}


def _frame_refs(where: Mapping[str, Any]) -> list[FrameRef]:
    """The frames a request's :func:`_refs` names."""
    segments = tuple((str(path), int(seed)) for path, seed in where["segments"])
    return FramePlaces(segments, np.frombuffer(where["frames"], dtype=np.int64).reshape(3, -1)).refs()


# == the worker process =================================================================


def _watch_parent(parent: int) -> None:
    """Exit at once when the process that started this one is gone."""
    while os.getppid() == parent:
        time.sleep(_PARENT_CHECK_S)
    os._exit(1)


def serve(requests: Connection, replies: Connection) -> None:
    """Answer flush requests until the table server closes the pipe."""
    metas: dict[str, TableMeta] = {}
    wals: dict[str, FileIO] = {}
    job: FlushJob | None = None
    while True:
        try:
            header = loads(requests.recv_bytes())
        except EOFError:
            return
        try:
            if header["op"] == "plan":
                groups = [FlushGroup(p, f, bool(n)) for p, f, n in header["groups"]]
                sent = [table_from_ipc(requests.recv_bytes())
                        for refs in header["refs"] if refs is None]
                meta = metas.get(header["path"])
                if meta is None or meta.schema_version != header["schema_version"]:
                    io = open_fileio(header["path"], header["storage_options"] or None)
                    meta = metas[header["path"]] = TableMeta.load(io, header["path"]).with_schema(
                        decode_schema(header["schema"]), header["schema_version"])
                wal = wals.get(header["wal"])
                if wal is None:
                    wal = wals[header["wal"]] = open_fileio(header["wal"], header["wal_options"] or None)
                tables = _tables(header["refs"], iter(sent), wal, flagged_schema(meta.physical))
                job = FlushJob(meta, header["instant"], groups, tables)
                plan = job.plan()
                result: Any = {"metadata": plan.metadata, "file_groups": plan.file_groups}
            elif header["op"] == "write" and job is not None:
                result, job = job.write(), None
            else:
                raise CommitFailedError(f"the flush worker got {header['op']!r} out of turn")
            reply = dumps({"result": result})
        except MemtierError as e:
            reply = error_to_wire(e)
        except Exception as e:  # noqa: BLE001 - every failure goes back to the table server
            log.exception("flush failed in the flush worker")
            reply = error_to_wire(CommitFailedError(f"the flush worker failed: {type(e).__name__}: {e}"))
        replies.send_bytes(reply)


def _tables(refs: list[dict[str, Any] | None], sent: Iterator[pa.Table], wal: FileIO,
            schema: pa.Schema) -> list[pa.Table]:
    """Each file group's rows: read from the WAL where the request says they lie, else the
    next table sent."""
    return read_rows(wal, [next(sent) if where is None else _frame_refs(where) for where in refs], schema)


def main(argv: Sequence[str]) -> None:
    """The worker process: ``argv`` is its request and reply pipes and its parent's pid."""
    request_fd, reply_fd, parent = (int(a) for a in argv)
    logging.basicConfig(level=logging.WARNING, format="flush worker %(process)d: %(message)s")
    return_freed_memory()  # a flush's buffers go back to the system once it ends
    freeze_startup()  # pandas, which pyarrow imports on first use, loaded now, not in the first flush
    read_gently()  # what it reads (WAL frames, base files to cluster) never holds up WAL syncs
    threading.Thread(target=_watch_parent, args=(parent,), name="memtier-flush-parent", daemon=True).start()
    serve(Connection(request_fd, writable=False), Connection(reply_fd, readable=False))
