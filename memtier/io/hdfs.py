"""HDFS through the ``hdfs-native`` client (Rust, no JVM, no libhdfs): the ``hdfs://``
backend of :mod:`memtier.io`.

Where HDFS differs from a local disk, and how this backend makes up for it:

* **Publishing.** A file is written to a temporary name beside it, hsync'd, closed, and
  renamed into place (``rename2``): with OVERWRITE for :meth:`HdfsFileIO.write_atomic`,
  without it for :meth:`HdfsFileIO.create_exclusive`, which the NameNode then refuses if
  the name exists, atomically: of two creators exactly one wins, and a file is whole
  whenever it is visible (a reader never sees a fence marker or timeline instant half
  written, as it could with create-without-overwrite, which shows the name at once).
* **Appends** keep the file open (one pipeline of DataNodes) and ``sync`` is an hsync:
  every DataNode of the pipeline has the bytes on disk, and the NameNode records the new
  length. hdfs-native does not recover a pipeline whose DataNode dies while an hsync
  waits (it waits forever), nor does it retry a NameNode without bound here: every call of
  a writer has a deadline (:data:`CALL_TIMEOUT_S`). A sync that misses it, or fails,
  *reopens* the file: its lease is recovered (the NameNode closes it at the length every
  live replica holds, which covers every hsync), it is opened for append again (a pipeline
  of the live replicas), and the bytes written since the last sync are written again past
  that length. Only if that fails too (the NameNode is down for longer) does the sync fail.
  A reopened file says so (``reopened``): an append to it is an append to a partial block,
  the riskier kind (docs/hdfs.md), so a WAL stream goes on in a new segment at its next write.
* **A pipeline that lost a DataNode** goes on with the live ones when the NameNode has none
  to add (``replace-datanode-on-failure.best-effort``, on by default here: on a cluster with
  as many DataNodes as replicas there is never another, and Hadoop's default then fails the
  write); HDFS re-replicates the block later. A whole new file written from bytes in hand
  (:meth:`HdfsFileIO.write_atomic`, :meth:`HdfsFileIO.create_exclusive`) whose writer fails
  anyway (hdfs-native never asks for a pipeline without a DataNode that refuses it, and the
  NameNode counts a dead one live for minutes) is written again to a new temporary file.
* **Reading a file still open** (a WAL segment being written, or left open by a process
  that died): the NameNode lists the length up to the last hsync, but hdfs-native reads
  only the file's complete blocks; the rest, in the block still being written, is read
  through WebHDFS (the DataNode serving it asks the replica for its visible length, as
  Java's client does), from the NameNode's HTTP address (``dfs.namenode.http-address``,
  default ``<namenode host>:9870``).
* **Lease recovery** (:meth:`HdfsFileIO.recover_lease`): a file a dead writer left open is
  closed at its replicas' common length, and its writer can append no more. ``truncate``
  (HDFS truncate is not in hdfs-native) recovers the lease and then rewrites the kept
  prefix over the file.

Storage options are Hadoop configuration keys, passed to hdfs-native as they are (plus
``dfs.namenode.http-address``, read here).
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, BinaryIO, TypeVar
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from memtier.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    StorageError,
    UnsupportedOperationError,
)
from memtier.io.base import AppendFile, Data, FileInfo, FileIO, _pieces, _temp_name, parent

__all__ = ["CALL_TIMEOUT_S", "HdfsFileIO"]

log = logging.getLogger(__name__)

#: Seconds a call of a file writer (a write, an hsync, a close) may take before the pipeline
#: is taken for broken: a healthy hsync takes milliseconds.
CALL_TIMEOUT_S = 10.0
#: Seconds a reopen (lease recovery, append, the bytes written again) may take in all.
REOPEN_TIMEOUT_S = 60.0
#: hdfs-native retries an unreachable NameNode this many times (0.5 s doubling, jittered)
#: unless the storage options say otherwise: about 15 s, not its default 3 minutes.
NAMENODE_ATTEMPTS = "5"
#: A pipeline that lost a DataNode goes on with the live ones when the NameNode has no other
#: to add (Hadoop's client, and hdfs-native, fail the write instead: on a cluster of as many
#: DataNodes as replicas there is never another). Unless the storage options say otherwise.
REPLACE_DATANODE_BEST_EFFORT = "true"
#: Writes of a whole new file (a timeline instant, a fence marker) tried this many times on a
#: fresh temporary file when a writer call fails: hdfs-native does not ask the NameNode for
#: a pipeline without a DataNode that refuses the connection, as Hadoop's client does.
NEW_FILE_ATTEMPTS = 3
#: Seconds before the first retry of such a write, doubling.
NEW_FILE_BACKOFF_S = 1.0
#: Answers in a row that brought no byte of what the NameNode counts visible before a read
#: of a file still open fails.
WEBHDFS_ATTEMPTS = 20
_HTTP_ADDRESS = "dfs.namenode.http-address"
_WEBHDFS_PORT = 9870
_PIECE = 4 << 20  # bytes handed to one writer call

T = TypeVar("T")

#: Clients created before a fork: never dropped in the child (dropping one there hangs it:
#: its runtime's threads do not exist in the child).
_inherited: list[Any] = []


def _first_line(error: BaseException) -> str:
    """hdfs-native's errors carry the NameNode's Java stack; the first line says it."""
    return (str(error).splitlines() or [type(error).__name__])[0]


class _WriterFailed(StorageError):
    """A call of an HDFS file writer failed or hung: its pipeline is broken."""


class _Writer:
    """An hdfs-native file writer whose every call has a deadline: a call that hangs (a
    pipeline hdfs-native cannot recover) raises :class:`StorageError` and leaves the
    writer broken, its thread parked where it hung."""

    def __init__(self, path: str, inner: Any) -> None:
        self.path = path
        self._inner = inner
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="memtier-hdfs-writer")
        self.broken = False

    def call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        if self.broken:
            raise _WriterFailed(f"{self.path}: the HDFS writer failed before; it takes no more {what}")
        future = self._thread.submit(fn, *args)
        try:
            return future.result(timeout=CALL_TIMEOUT_S)
        except FutureTimeout as e:
            self.abandon()
            raise _WriterFailed(f"{self.path}: HDFS {what} did not return in {CALL_TIMEOUT_S:.0f} s "
                               "(a DataNode of its pipeline or the NameNode is gone)") from e
        except Exception as e:
            self.abandon()
            raise _WriterFailed(f"{self.path}: HDFS {what} failed: {_first_line(e)}") from e

    def write(self, data: bytes | memoryview | pa.Buffer) -> None:
        view = memoryview(data).cast("B")
        for start in range(0, len(view), _PIECE):
            self.call("write", self._inner.write, bytes(view[start : start + _PIECE]))

    def hsync(self) -> None:
        self.call("hsync", self._inner.hsync)

    def close(self) -> None:
        self.call("close", self._inner.close)
        self._thread.shutdown(wait=False)

    def abandon(self) -> None:
        """Never use this writer again (a call of it may still be parked in its thread)."""
        self.broken = True
        self._thread.shutdown(wait=False)


class _WriterStream:
    """The write side of a binary stream over a :class:`_Writer` (what Parquet and Avro
    writers need), buffering small writes into pieces of :data:`_PIECE`."""

    def __init__(self, writer: _Writer) -> None:
        self._writer = writer
        self._buffer = bytearray()
        self._written = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._written += len(view)
        if len(view) >= _PIECE:
            self.flush()
            self._writer.write(view)
        else:
            self._buffer += view
            if len(self._buffer) >= _PIECE:
                self.flush()
        return len(view)

    def flush(self) -> None:
        if self._buffer:
            self._writer.write(self._buffer)
            self._buffer = bytearray()

    def tell(self) -> int:
        return self._written

    def close(self) -> None:
        self.flush()

    @property
    def closed(self) -> bool:
        return False


class _HdfsAppendFile(AppendFile):
    """An HDFS file open for appends, reopened under a new pipeline when a sync fails (see
    the module docstring); thread-safe."""

    def __init__(self, io: HdfsFileIO, path: str, writer: _Writer, size: int) -> None:
        self.path = path
        self._io = io
        self._writer = writer
        self._size = size
        self._synced = size  # bytes the last successful sync covers
        self._unsynced: list[bytes] = []  # written since: what a reopen writes again
        self._lock = threading.Lock()  # hdfs-native refuses a write during an hsync

    def write(self, data: bytes | memoryview) -> int:
        piece = bytes(data)
        with self._lock:
            self._unsynced.append(piece)
            self._size += len(piece)
            self._writer.write(piece)
            return self._size

    def writev(self, parts: Sequence[bytes | memoryview]) -> int:
        return self.write(b"".join(parts))

    def sync(self) -> None:
        with self._lock:
            try:
                self._writer.hsync()
            except StorageError as e:
                log.warning("%s: %s; reopening it under a new pipeline", self.path, e)
                self._reopen(e)
            self._synced, self._unsynced = self._size, []

    def _reopen(self, cause: StorageError) -> None:
        """Recover the file's lease, append to it again, and write what the last sync did
        not cover past the length the recovery kept (holding ``_lock``)."""
        self._writer.abandon()
        deadline = time.monotonic() + REOPEN_TIMEOUT_S
        while True:
            try:
                self._io.recover_lease(self.path, timeout=max(0.0, deadline - time.monotonic()))
                length = self._io.info(self.path).size
                if not self._synced <= length <= self._size:
                    raise StorageError(f"{self.path}: lease recovery kept {length} bytes; {self._synced} "
                                       f"were synced and {self._size} written")
                writer = self._io._open_writer(self.path, append=True)
                writer.write(b"".join(self._unsynced)[length - self._synced :])
                writer.hsync()
                self._writer = writer
                self.reopened = True
                log.warning("%s: reopened at byte %d, %d unsynced bytes written again",
                            self.path, length, self._size - length)
                return
            except (StorageError, OSError) as e:
                if time.monotonic() >= deadline:
                    raise StorageError(f"{self.path}: the sync failed ({cause}) and the file could not be "
                                       f"reopened in {REOPEN_TIMEOUT_S:.0f} s: {e}") from e
                log.warning("%s: reopening failed (%s); trying again", self.path, e)
                time.sleep(1.0)  # the NameNode or a DataNode may come back

    def close(self) -> None:
        """Close the file; one that failed is only let go (everything synced is kept: the
        NameNode closes it when its lease runs out, or recovery does)."""
        with self._lock:
            if self._writer.broken:
                return
            try:
                self._writer.close()
            except StorageError as e:
                log.warning("%s: %s; left for lease recovery", self.path, e)

    @property
    def size(self) -> int:
        return self._size


class HdfsFileIO(FileIO):
    """HDFS via ``hdfs-native``; see the module docstring for how it meets each operation."""

    def __init__(self, root: str, storage_options: Mapping[str, str] | None = None) -> None:
        super().__init__(root, storage_options)
        try:
            import hdfs_native  # noqa: F401
        except ImportError as e:
            raise UnsupportedOperationError(
                "hdfs:// needs the hdfs-native package: pip install 'memtier[hdfs]'"
            ) from e
        split = urlsplit(root)
        if not split.hostname:
            raise InvalidArgumentError(f"cannot use HDFS at {root}: the URI names no NameNode (hdfs://host:port/...)")
        self._netloc = split.netloc
        self._host = split.hostname
        self._port = split.port
        self._config = {"dfs.client.failover.max.attempts": NAMENODE_ATTEMPTS,
                        "dfs.client.block.write.replace-datanode-on-failure.best-effort": REPLACE_DATANODE_BEST_EFFORT,
                        **self.storage_options}
        self._http = self.storage_options.get(_HTTP_ADDRESS, f"{split.hostname}:{_WEBHDFS_PORT}")
        self._clients: tuple[int, Any, Any] | None = None  # pid, client, lease-recovery client
        self._clients_lock = threading.Lock()

    # -- clients ---------------------------------------------------------------------------
    def _both(self) -> tuple[Any, Any]:
        """This process's clients: one for everything, one to recover leases the first
        holds (the NameNode refuses a lease holder's own recovery)."""
        with self._clients_lock:
            if self._clients is None or self._clients[0] != os.getpid():
                from hdfs_native import Client

                if self._clients is not None:
                    _inherited.append(self._clients)
                url = f"hdfs://{self._netloc}"
                self._clients = (os.getpid(), Client(url, self._config), Client(url, self._config))
            return self._clients[1], self._clients[2]

    @property
    def _client(self) -> Any:
        return self._both()[0]

    def _p(self, path: str) -> str:
        return urlsplit(path).path or "/" if "://" in path else path

    def _uri(self, native: str) -> str:
        return f"hdfs://{self._netloc}/{native.lstrip('/')}"

    def _call(self, what: str, path: str, fn: Callable[..., T], *args: Any) -> T:
        """One NameNode call, its errors as memtier's (the Java stack trimmed)."""
        try:
            return fn(*args)
        except FileNotFoundError as e:
            raise NotFoundError(f"no such file: {path}") from e
        except FileExistsError as e:
            raise AlreadyExistsError(f"already exists: {path} ({_first_line(e)})") from e
        except Exception as e:
            raise StorageError(f"HDFS {what} of {path} failed: {_first_line(e)}") from e

    # -- reading ---------------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        try:
            self.info(path)
        except NotFoundError:
            return False
        return True

    def info(self, path: str) -> FileInfo:
        status = self._call("stat", path, self._client.get_file_info, self._p(path))
        return self._to_info(status)

    def _to_info(self, status: Any) -> FileInfo:
        return FileInfo(self._uri(status.path), status.length, status.isdir, status.modification_time / 1000)

    def _list(self, path: str, recursive: bool) -> list[FileInfo]:
        try:
            statuses = self._call("list", path, lambda: list(self._client.list_status(self._p(path), recursive)))
        except NotFoundError:
            return []
        return sorted((self._to_info(s) for s in statuses), key=lambda f: f.path)

    def list_dir(self, path: str) -> list[FileInfo]:
        return self._list(path, False)

    def list_files(self, path: str) -> list[FileInfo]:
        return [f for f in self._list(path, True) if not f.is_dir]

    def read_bytes(self, path: str) -> bytes:
        return self.read_range(path, 0, 1 << 62)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        return self.read_ranges(path, [(offset, length)])[0]

    def read_ranges(
        self, path: str, ranges: Sequence[tuple[int, int]], *, synced: bool = False
    ) -> list[bytes | bytearray]:
        """Complete blocks through hdfs-native; the bytes of a block still being written
        (a file open for appends) through WebHDFS, one request for all ranges' parts: at
        least what the NameNode counts synced, or with ``synced`` every byte asked for
        (the NameNode's count can lag an hsync: a WAL reading its acknowledged frames
        must never get fewer bytes than it wrote)."""
        reader = self._call("open", path, self._client.read, self._p(path))
        complete = len(reader)  # of a file still open: its complete blocks only
        reads: list[bytes | bytearray] = [
            reader.read_range(offset, min(offset + length, complete) - offset) if offset < complete else b""
            for offset, length in ranges
        ]
        open_ended = [i for i, (offset, length) in enumerate(ranges) if offset + length > complete]
        if not open_ended:
            return reads
        lo = max(complete, min(ranges[i][0] for i in open_ended))
        hi = max(sum(ranges[i]) for i in open_ended)
        visible = hi if synced else self.info(path).size  # what the last hsync of a file still open covers
        if visible <= complete:
            return reads  # closed (or nothing synced in its last block yet)
        tail = self._webhdfs_read(path, lo, hi - lo, at_least=max(0, min(visible, hi) - lo))
        for i in open_ended:
            offset, length = ranges[i]
            start = max(offset, complete)
            reads[i] = reads[i] + tail[max(0, start - lo) : max(0, offset + length - lo)]
        return reads

    def _webhdfs_read(self, path: str, offset: int, length: int, at_least: int) -> bytes:
        """Up to ``length`` bytes from ``offset`` through WebHDFS, at least ``at_least``
        (what the NameNode counts synced): past that, what the DataNode's replica holds
        acknowledged (the NameNode's count can lag it, e.g. at a block's end). An answer
        may hold fewer bytes than asked (it did at the start of a block reopened for
        append, and when the DataNode it came from held an older replica): below
        ``at_least`` the rest is asked for again, each request sent to a DataNode the
        NameNode picks, until :data:`WEBHDFS_ATTEMPTS` answers in a row brought nothing (or
        failed: the NameNode may send one to a DataNode that died)."""
        data = bytearray()
        empty = 0
        while len(data) < length:
            asked = length - len(data)
            try:
                chunk = self._webhdfs_get(path, offset + len(data), asked)
            except StorageError:  # e.g. sent to a DataNode that died, not yet known dead
                if empty + 1 >= WEBHDFS_ATTEMPTS:
                    raise
                chunk = b""
            data += chunk
            if len(data) >= at_least and len(chunk) < asked:
                break  # the replica's visible end
            empty = 0 if chunk else empty + 1
            if empty >= WEBHDFS_ATTEMPTS:
                raise StorageError(f"HDFS served {len(data)} of the {at_least} synced bytes of {path} "
                                   f"from byte {offset} ({WEBHDFS_ATTEMPTS} DataNodes asked)")
            if not chunk:
                time.sleep(0.05)  # another replica, or this one a moment later
        return bytes(data)

    def _webhdfs_get(self, path: str, offset: int, length: int) -> bytes:
        query = urllib.parse.urlencode({"op": "OPEN", "offset": offset, "length": length,
                                        "user.name": getpass.getuser()})
        url = f"http://{self._http}/webhdfs/v1{urllib.parse.quote(self._p(path))}?{query}"
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                return response.read()
        except OSError as e:
            raise StorageError(f"cannot read the open end of {path} through WebHDFS at {self._http} (set "
                               f"the storage option {_HTTP_ADDRESS} to the NameNode's HTTP address): {e}") from e

    def open_input(self, path: str) -> pa.NativeFile:
        return pa.PythonFile(self._call("open", path, self._client.read, self._p(path)), mode="r")

    # -- writing ---------------------------------------------------------------------------
    def _open_writer(self, path: str, *, append: bool = False) -> _Writer:
        from hdfs_native import WriteOptions

        native = self._p(path)
        if append:
            return _Writer(path, self._call("append", path, self._client.append, native))
        options = WriteOptions(overwrite=False, create_parent=True)
        return _Writer(path, self._call("create", path, self._client.create, native, options))

    def _write_temp(self, path: str, data: Data) -> str:
        """Write ``data`` to a new temporary file beside ``path``, hsync'd (on the
        DataNodes' disks, not only in their memory) and closed; its path. A writer that
        fails (a DataNode of its pipeline gone) is let go and the whole file written again
        to a new temporary file, up to :data:`NEW_FILE_ATTEMPTS` times in all."""
        pauses = [NEW_FILE_BACKOFF_S * 2**i for i in range(NEW_FILE_ATTEMPTS - 1)]
        for attempt, pause in enumerate(pauses, start=2):
            try:
                return self._write_temp_once(path, data)
            except _WriterFailed as e:
                log.warning("%s; writing the file again in %.0f s (attempt %d of %d)", e, pause, attempt,
                            NEW_FILE_ATTEMPTS)
                time.sleep(pause)
        return self._write_temp_once(path, data)

    def _write_temp_once(self, path: str, data: Data) -> str:
        with self._temp_output(path) as (out, tmp):
            for piece in _pieces(data):
                out.write(piece)
        return tmp

    @contextlib.contextmanager
    def _created(self, path: str) -> Iterator[_Writer]:
        """A writer of the new file ``path`` (refused if it exists), let go and the file
        deleted on an exception."""
        writer = self._open_writer(path)
        try:
            yield writer
        except BaseException:
            writer.abandon()
            with contextlib.suppress(StorageError):
                self.delete(path)
            raise

    @contextlib.contextmanager
    def _temp_output(self, path: str) -> Iterator[tuple[_WriterStream, str]]:
        """A stream into a new temporary file beside ``path`` and its path: hsync'd and
        closed on a clean exit, deleted on an exception."""
        tmp = _temp_name(path)
        with self._created(tmp) as writer:
            stream = _WriterStream(writer)
            yield stream, tmp
            stream.flush()
            writer.hsync()
            writer.close()

    def _publish(self, tmp: str, path: str, *, exclusive: bool) -> None:
        try:
            self._call("rename", path, self._client.rename, self._p(tmp), self._p(path), not exclusive)
        except BaseException:
            with contextlib.suppress(StorageError):
                self.delete(tmp)
            raise

    def write_atomic(self, path: str, data: Data) -> None:
        self._publish(self._write_temp(path, data), path, exclusive=False)

    def create_exclusive(self, path: str, data: Data) -> None:
        if self.exists(path):
            raise AlreadyExistsError(f"already exists: {path}")
        self._publish(self._write_temp(path, data), path, exclusive=True)

    @contextlib.contextmanager
    def open_output(self, path: str) -> Iterator[BinaryIO]:
        with self._temp_output(path) as (out, tmp):
            yield out  # type: ignore[misc]
        self._publish(tmp, path, exclusive=False)

    def open_append(self, path: str) -> AppendFile:
        """Open ``path`` for appends, creating it if missing; one another writer left open
        (a process that died) is taken over by lease recovery first."""
        if not self.exists(path):
            return _HdfsAppendFile(self, path, self._open_writer(path), 0)
        try:
            writer = self._open_writer(path, append=True)
        except AlreadyExistsError:  # still leased to a writer that is gone: fence it off
            self.recover_lease(path)
            writer = self._open_writer(path, append=True)
        return _HdfsAppendFile(self, path, writer, self.info(path).size)

    def create_append(self, path: str, head: bytes) -> AppendFile:
        """Create ``path`` with a writer kept open, ``head`` hsync'd: its first block is
        written as a new block, never reopened by an append (hdfs-native appends to a
        partial block under its old generation stamp, and lease recovery after a DataNode
        died under such an append was seen to keep only the bytes from before it: 152 of
        121,104 synced, once in nine runs). A reader may see the file shorter than
        ``head`` until the hsync (a WAL skips such a segment: nothing in it was
        acknowledged)."""
        with self._created(path) as writer:  # (create without overwrite: the NameNode refuses a second)
            writer.write(head)
            writer.hsync()
        return _HdfsAppendFile(self, path, writer, len(head))

    def recover_lease(self, path: str, timeout: float = REOPEN_TIMEOUT_S) -> None:
        """Close a file another writer left open at the length all its live replicas hold
        (covering every hsync) and take it from that writer: HDFS lease recovery."""
        recovery = self._both()[1]
        deadline = time.monotonic() + timeout
        while not self._call("lease recovery", path, recovery.recover_lease, self._p(path)):
            if time.monotonic() > deadline:
                raise StorageError(f"lease recovery of {path} did not finish in {timeout:.0f} s")
            time.sleep(0.2)  # the primary DataNode synchronizes the last block's replicas

    def truncate(self, path: str, length: int) -> None:
        """Keep the first ``length`` bytes (HDFS has no truncate in this client: the kept
        bytes are written anew and the file replaced); refused, changing nothing, when HDFS
        serves fewer than that, so that a cut never drops bytes it was asked to keep."""
        self.recover_lease(path)
        size = self.info(path).size
        if size < length:
            raise StorageError(f"{path}: HDFS holds {size} bytes after lease recovery, fewer than the {length} to keep")
        if size != length:
            kept = self.read_range(path, 0, length)
            if len(kept) != length:
                raise StorageError(f"{path}: HDFS served {len(kept)} of the {length} bytes to keep")
            self.write_atomic(path, kept)

    def rename(self, src: str, dst: str) -> None:
        self.makedirs(parent(dst))
        self._call("rename", src, self._client.rename, self._p(src), self._p(dst), True)

    def delete(self, path: str) -> None:
        with contextlib.suppress(NotFoundError):
            self._call("delete", path, self._client.delete, self._p(path), False)

    def delete_dir(self, path: str) -> None:
        with contextlib.suppress(NotFoundError):
            self._call("delete", path, self._client.delete, self._p(path), True)

    def makedirs(self, path: str) -> None:
        self._call("mkdirs", path, self._client.mkdirs, self._p(path), 0o755, True)

    # -- interop ---------------------------------------------------------------------------
    def arrow_fs(self, path: str) -> tuple[pafs.FileSystem, str]:
        from hdfs_native.fsspec import HdfsFileSystem

        fs = HdfsFileSystem(self._host, self._port, skip_instance_cache=True, **self._config)
        return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), self._p(path)

