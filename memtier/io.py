"""The only storage entry point: a small FileIO over the local disk, pyarrow.fs and fsspec.

``open_fileio(uri)`` picks a backend by scheme:

* plain paths and ``file://`` -> :class:`LocalFileIO` (os calls, fsync, rename, hard links);
* ``s3://`` -> :class:`ObjectStoreFileIO` over ``pyarrow.fs.S3FileSystem`` (no append; a
  whole-object PUT is the atomic, durable unit);
* ``hdfs://`` -> :class:`~memtier.hdfsio.HdfsFileIO` over the ``hdfs-native`` client
  (append, hsync, lease recovery; how it meets HDFS's semantics: :mod:`memtier.hdfsio`);
* anything else fsspec knows, ``memory://`` for tests included -> :class:`FsspecFileIO`.

Every backend offers the same operations: whole-file atomic publish (``write_atomic``,
``open_output``), create-if-absent (``create_exclusive``) for timeline files, durable
appends (``open_append``) where the store has them, listing, ranged reads, and a
``pyarrow.fs`` view for Parquet. Paths are the caller's URIs; each backend maps them.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, BinaryIO
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from memtier.diskpacing import PacedFile, trickle_unlink
from memtier.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    StorageError,
    UnsupportedOperationError,
)

__all__ = [
    "AppendFile",
    "FileIO",
    "FileInfo",
    "FsspecFileIO",
    "LocalFileIO",
    "ObjectStoreFileIO",
    "join",
    "open_fileio",
]

_TEMP_PREFIX = ".memtier-tmp-"


def join(base: str, *parts: str) -> str:
    """Join path segments with ``/`` (URIs keep their scheme and authority)."""
    path = base.rstrip("/") if base not in ("/", "") else base
    for part in parts:
        part = part.strip("/")
        if not part:
            continue
        path = f"{path}/{part}" if path not in ("", "/") else f"{path}{part}"
    return path


def parent(path: str) -> str:
    """The directory part of a path or URI."""
    split = urlsplit(path)
    if split.scheme and split.scheme != "file":
        head = path[: len(path) - len(split.path)]
        return head + (posixpath.dirname(split.path.rstrip("/")) or "/")
    return posixpath.dirname(path.rstrip("/")) or "/"


def relpath(base: str, path: str) -> str:
    """``path`` relative to ``base`` (both as one FileIO names them)."""
    base = base.rstrip("/")
    if path == base:
        return ""
    if not path.startswith(base + "/"):
        raise InvalidArgumentError(f"{path} is not below {base}")
    return path[len(base) + 1 :]


def basename(path: str) -> str:
    """The last segment of a path or URI."""
    return posixpath.basename(path.rstrip("/"))


#: What publishing writes take: one bytes-like object, or an iterable of them written in
#: turn (a large file then never has to be joined in memory; a generator may even encode
#: each piece only when the previous one is written).
Bytes = bytes | bytearray | memoryview | pa.Buffer
Data = Bytes | Iterable[Bytes]


def _pieces(data: Data) -> Iterable[Bytes]:
    return (data,) if isinstance(data, (bytes, bytearray, memoryview, pa.Buffer)) else data


@dataclass(frozen=True)
class FileInfo:
    """One directory entry. ``path`` is usable with the FileIO that listed it."""

    path: str
    size: int
    is_dir: bool
    mtime: float | None = None

    @property
    def name(self) -> str:
        return basename(self.path)


class AppendFile(ABC):
    """A file opened for appends; ``sync`` makes everything written so far durable."""

    path: str

    @abstractmethod
    def write(self, data: bytes | memoryview) -> int:
        """Append ``data``; returns the file size after the write."""

    def writev(self, parts: Sequence[bytes | memoryview]) -> int:
        """Append ``parts`` in order (one system call where the store has one); returns the size."""
        for part in parts:
            self.write(part)
        return self.size

    @abstractmethod
    def sync(self) -> None:
        """Make every byte written so far durable (fdatasync / hsync)."""

    @abstractmethod
    def close(self) -> None:
        """Close the file (does not imply ``sync``)."""

    def drop_cache(self, length: int) -> None:  # noqa: B027 - an optional hook, no-op by default
        """Let the OS drop the first ``length`` bytes, already synced, from its page cache.

        For write-once logs that are rarely re-read: their pages would otherwise crowd out
        memory that matters and cost a reclaim on every later write. A no-op where the store
        keeps no local cache.
        """

    @property
    @abstractmethod
    def size(self) -> int:
        """Bytes in the file, counting unsynced appends."""

    def __enter__(self) -> AppendFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FileIO(ABC):
    """Storage operations memtier needs, over one filesystem."""

    #: True when ``open_append`` works (local disk, HDFS, memory); False on object stores.
    supports_append: bool = True
    #: True when ``rename`` is atomic (publishing by temp + rename is safe).
    atomic_rename: bool = True

    def __init__(self, root: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.storage_options: dict[str, str] = dict(storage_options or {})

    # -- reading -------------------------------------------------------------------------
    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def info(self, path: str) -> FileInfo:
        """Metadata of one file or directory; :class:`NotFoundError` if missing."""

    @abstractmethod
    def list_dir(self, path: str) -> list[FileInfo]:
        """Direct children of a directory, sorted by name; empty if it does not exist."""

    @abstractmethod
    def list_files(self, path: str) -> list[FileInfo]:
        """Every file below a directory (recursive), sorted by path; empty if missing."""

    @abstractmethod
    def read_bytes(self, path: str) -> bytes: ...

    @abstractmethod
    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``offset`` (fewer at end of file)."""

    def read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes | bytearray]:
        """The bytes of each ``(offset, length)`` range of a file (fewer at its end)."""
        return [self.read_range(path, offset, length) for offset, length in ranges]

    @abstractmethod
    def open_input(self, path: str) -> pa.NativeFile:
        """A random-access pyarrow file (for Parquet and large reads)."""

    def mmap(self, path: str) -> memoryview | None:
        """A read-only zero-copy view of the file where the store allows it, else None."""
        return None

    # -- writing -------------------------------------------------------------------------
    @abstractmethod
    def write_atomic(self, path: str, data: Data) -> None:
        """Publish ``data`` at ``path`` all at once and durably, replacing any old file."""

    @abstractmethod
    def create_exclusive(self, path: str, data: Data) -> None:
        """Publish ``data`` at ``path`` durably; :class:`AlreadyExistsError` if it exists."""

    @abstractmethod
    def open_output(self, path: str) -> contextlib.AbstractContextManager[BinaryIO]:
        """A stream whose bytes appear at ``path`` atomically and durably on clean exit.

        On an exception nothing is published and temporary files are removed.
        """

    def open_append(self, path: str) -> AppendFile:
        """Open (creating if needed) ``path`` for durable appends."""
        raise UnsupportedOperationError(f"{type(self).__name__} cannot append to {path}")

    @abstractmethod
    def truncate(self, path: str, length: int) -> None:
        """Cut the file to ``length`` bytes, durably."""

    def recover_lease(self, path: str, timeout: float = 60.0) -> None:  # noqa: B027 - no-op by default
        """Take a file that another writer (a process that died, or one being fenced off)
        left open away from it, at the length its syncs made durable: HDFS lease recovery
        (:mod:`memtier.hdfsio`). A no-op where files have no leases."""

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Move a file (atomic only where :attr:`atomic_rename` is true)."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove a file; a missing file is not an error."""

    @abstractmethod
    def delete_dir(self, path: str) -> None:
        """Remove a directory and everything below it; missing is not an error."""

    @abstractmethod
    def makedirs(self, path: str) -> None: ...

    # -- interop -------------------------------------------------------------------------
    @abstractmethod
    def arrow_fs(self, path: str) -> tuple[pafs.FileSystem, str]:
        """A ``pyarrow.fs`` filesystem and the path it knows ``path`` by."""

    def join(self, base: str, *parts: str) -> str:
        return join(base, *parts)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Cross process boundaries as (root, options); handles reopen on the far side.
        return (open_fileio, (self.root, self.storage_options))


def _temp_name(path: str) -> str:
    """A fresh name beside ``path`` for writing it before the rename that publishes it. It
    neither contains ``path``'s name nor ends with a Hudi extension: other engines recognize
    Hudi files by name (Presto 0.287's Hudi connector took a half-written
    ``.memtier-tmp-<uuid>-<base file name>`` for a base file and failed the query), so a
    temporary file must look like no base file, log file or instant, even when a crash
    leaves it behind."""
    return join(parent(path), f"{_TEMP_PREFIX}{uuid.uuid4().hex}.tmp")


def is_temp_file(name: str) -> bool:
    """True for the temporary files ``open_output``/``write_atomic`` leave after a crash."""
    return name.startswith(_TEMP_PREFIX)


#: A temporary file unmodified this long was left by a crash: no write takes a day.
ORPHAN_AGE_S = 24 * 3600.0


def sweep_temp_files(io: FileIO, root: str, *, now: float, older_than: float = ORPHAN_AGE_S) -> list[str]:
    """Delete the temporary files a crash left below ``root`` (a writer that died between
    writing a file and publishing it), those unmodified for ``older_than`` seconds at
    ``now`` (seconds since the epoch); their paths. Readers never take them for data:
    their names look like no Hudi or WAL file."""
    swept = []
    for info in io.list_files(root):
        if is_temp_file(basename(info.path)) and info.mtime is not None and now - info.mtime >= older_than:
            io.delete(info.path)
            swept.append(info.path)
    return swept


# ======================================================================================
# Local disk
# ======================================================================================


def _local_path(path: str) -> str:
    if path.startswith("file://"):
        path = urlsplit(path).path
    return os.path.abspath(path)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_IOV_MAX = os.sysconf("SC_IOV_MAX")  # buffers one os.writev may take
#: The largest read a :class:`GentleFile` asks the disk for at once.
GENTLE_READ_BYTES = 1 << 20
#: Whether this process reads local files gently everywhere (:func:`read_gently`).
_gentle_reads = False


def read_gently(enabled: bool = True) -> None:
    """Make this process read local files through :class:`GentleFile` (Parquet inputs,
    whole files), not memory-mapped or buffered: for processes doing background work
    (table services, flush workers) on a disk whose WAL syncs acknowledge writes."""
    global _gentle_reads
    _gentle_reads = enabled


class GentleFile(io.RawIOBase):
    """A local file read without the kernel's readahead (``POSIX_FADV_RANDOM``), one
    request of at most :data:`GENTLE_READ_BYTES` at a time, so a large read never queues
    megabytes ahead of a WAL write on the same disk (the disk's readahead here is 8 MB: a
    Parquet file read whole by pyarrow beside the WAL raised its sync p99 from ~1.7 to
    13-14 ms memory-mapped, to 5-6 ms through this; bench/RESULTS.md). About as fast for a
    whole file."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)
        self._size = os.fstat(self._fd).st_size
        self._position = 0

    def pread(self, offset: int, length: int) -> bytes | bytearray:
        """Up to ``length`` bytes from ``offset`` (fewer at the end of the file)."""
        data = bytearray(length)
        done = self.read_at(memoryview(data), offset)
        return data if done == length else bytes(data[:done])

    def read_at(self, into: memoryview, offset: int) -> int:
        """Fill ``into`` from ``offset`` (less at the end of the file); the bytes read."""
        done = 0
        while done < len(into):
            n = os.preadv(self._fd, [into[done : done + GENTLE_READ_BYTES]], offset + done)
            if n == 0:
                break
            done += n
        return done

    def drop_cache(self, offset: int, length: int) -> None:
        """Drop these bytes' pages from the page cache (read once, not needed again)."""
        os.posix_fadvise(self._fd, offset, length, os.POSIX_FADV_DONTNEED)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        done = self.read_at(view[: max(0, self._size - self._position)], self._position)
        self._position += done
        return done

    def readall(self) -> bytes:
        data = self.pread(self._position, max(0, self._size - self._position))
        self._position += len(data)
        return bytes(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


class _LocalAppendFile(AppendFile):
    def __init__(self, path: str) -> None:
        self.path = path
        local = _local_path(path)
        directory = os.path.dirname(local)
        os.makedirs(directory, exist_ok=True)
        created = not os.path.exists(local)
        self._fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size
        if created:
            _fsync_dir(directory)  # the new directory entry must survive a crash too

    def write(self, data: bytes | memoryview) -> int:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
            self._size += written
        return self._size

    def writev(self, parts: Sequence[bytes | memoryview]) -> int:
        for start in range(0, len(parts), _IOV_MAX):
            chunk = parts[start : start + _IOV_MAX]
            written = os.writev(self._fd, chunk)
            self._size += written
            if written < sum(memoryview(part).nbytes for part in chunk):  # short (rare)
                for part in chunk:
                    view = memoryview(part).cast("B")
                    if written < len(view):
                        self.write(view[written:])
                    written = max(0, written - len(view))
        return self._size

    def sync(self) -> None:
        os.fdatasync(self._fd)

    def drop_cache(self, length: int) -> None:
        os.posix_fadvise(self._fd, 0, length, os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def size(self) -> int:
        return self._size

    def fileno(self) -> int:
        return self._fd


class LocalFileIO(FileIO):
    """Local disk through os calls: fsync'd files and directories, atomic rename and link."""

    def exists(self, path: str) -> bool:
        return os.path.exists(_local_path(path))

    def info(self, path: str) -> FileInfo:
        try:
            st = os.stat(_local_path(path))
        except FileNotFoundError as e:
            raise NotFoundError(f"no such file: {path}") from e
        return FileInfo(path, st.st_size, os.path.isdir(_local_path(path)), st.st_mtime)

    def list_dir(self, path: str) -> list[FileInfo]:
        local = _local_path(path)
        try:
            entries = list(os.scandir(local))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for entry in entries:
            try:
                st = entry.stat()
            except FileNotFoundError:  # removed while listing
                continue
            out.append(FileInfo(join(path, entry.name), st.st_size, entry.is_dir(), st.st_mtime))
        return sorted(out, key=lambda f: f.path)

    def list_files(self, path: str) -> list[FileInfo]:
        local = _local_path(path)
        out = []
        for directory, _dirs, files in os.walk(local):
            rel = os.path.relpath(directory, local)
            for name in files:
                full = os.path.join(directory, name)
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue
                shown = join(path, rel, name) if rel != "." else join(path, name)
                out.append(FileInfo(shown, st.st_size, False, st.st_mtime))
        return sorted(out, key=lambda f: f.path)

    def read_bytes(self, path: str) -> bytes:
        try:
            with GentleFile(_local_path(path)) if _gentle_reads else open(_local_path(path), "rb") as f:
                return f.read()
        except FileNotFoundError as e:
            raise NotFoundError(f"no such file: {path}") from e

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        try:
            with open(_local_path(path), "rb") as f:
                f.seek(offset)
                return f.read(length)
        except FileNotFoundError as e:
            raise NotFoundError(f"no such file: {path}") from e

    def read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes | bytearray]:
        """Read gently (:class:`GentleFile`: the kernel's readahead of a large read queued
        megabytes ahead of WAL writes, sync p99 2 -> 17 ms, bench/RESULTS.md), and drop
        the pages read from the cache after (they are read once)."""
        try:
            source = GentleFile(_local_path(path))
        except FileNotFoundError as e:
            raise NotFoundError(f"no such file: {path}") from e
        with source:
            read: list[bytes | bytearray] = []
            for offset, length in ranges:
                read.append(source.pread(offset, length))
                source.drop_cache(offset, length)
            return read

    def open_input(self, path: str) -> pa.NativeFile:
        try:
            if _gentle_reads:
                return pa.PythonFile(GentleFile(_local_path(path)), mode="r")
            return pa.memory_map(_local_path(path), "r")
        except FileNotFoundError as e:
            raise NotFoundError(f"no such file: {path}") from e

    def mmap(self, path: str) -> memoryview | None:
        with self.open_input(path) as mapped:
            buffer = mapped.read_buffer()
        return memoryview(buffer)

    def _publish(self, tmp: str, path: str, exclusive: bool) -> None:
        """Durably move a fully written temp file into place."""
        local = _local_path(path)
        try:
            _fsync_path(tmp)
            if exclusive:
                try:
                    os.link(tmp, local)
                except FileExistsError as e:
                    raise AlreadyExistsError(f"already exists: {path}") from e
            else:
                os.replace(tmp, local)
            _fsync_dir(os.path.dirname(local))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _write_temp(self, path: str, data: Data) -> str:
        local = _local_path(path)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        tmp = _local_path(_temp_name(local))
        try:
            with open(tmp, "wb") as f:
                paced = PacedFile(f)
                for piece in _pieces(data):
                    paced.write(piece)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return tmp

    def write_atomic(self, path: str, data: Data) -> None:
        self._publish(self._write_temp(path, data), path, exclusive=False)

    def create_exclusive(self, path: str, data: Data) -> None:
        if os.path.exists(_local_path(path)):
            raise AlreadyExistsError(f"already exists: {path}")
        self._publish(self._write_temp(path, data), path, exclusive=True)

    @contextlib.contextmanager
    def open_output(self, path: str) -> Iterator[BinaryIO]:
        local = _local_path(path)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        tmp = _local_path(_temp_name(local))
        try:
            with open(tmp, "wb", buffering=1 << 20) as f:
                yield PacedFile(f)  # type: ignore[misc]
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        self._publish(tmp, path, exclusive=False)

    def open_append(self, path: str) -> AppendFile:
        return _LocalAppendFile(path)

    def truncate(self, path: str, length: int) -> None:
        local = _local_path(path)
        os.truncate(local, length)
        _fsync_path(local)

    def rename(self, src: str, dst: str) -> None:
        dst_local = _local_path(dst)
        os.makedirs(os.path.dirname(dst_local), exist_ok=True)
        os.replace(_local_path(src), dst_local)
        _fsync_dir(os.path.dirname(dst_local))

    def delete(self, path: str) -> None:
        trickle_unlink(_local_path(path))  # a large file over ~5 ms per 8 MB: off the write path

    def delete_dir(self, path: str) -> None:
        import shutil

        local = _local_path(path)
        for directory, _, files in os.walk(local):  # large files freed a step at a time first
            for name in files:
                trickle_unlink(os.path.join(directory, name))
        shutil.rmtree(local, ignore_errors=True)

    def makedirs(self, path: str) -> None:
        os.makedirs(_local_path(path), exist_ok=True)

    def arrow_fs(self, path: str) -> tuple[pafs.FileSystem, str]:
        return pafs.LocalFileSystem(), _local_path(path)


# ======================================================================================
# Object stores through pyarrow.fs (S3 and S3-compatible servers)
# ======================================================================================

# storage_options keys shared with hudi-rs / object_store, so one dict serves both readers.
_S3_OPTION_KEYS = {
    "aws_access_key_id": "access_key",
    "aws_secret_access_key": "secret_key",
    "aws_session_token": "session_token",
    "aws_region": "region",
}


def _s3_filesystem(options: Mapping[str, str]) -> pafs.S3FileSystem:
    kwargs: dict[str, Any] = {}
    unknown = []
    for key, value in options.items():
        k = key.lower()
        if k in _S3_OPTION_KEYS:
            kwargs[_S3_OPTION_KEYS[k]] = value
        elif k in ("aws_endpoint", "aws_endpoint_url"):
            endpoint = urlsplit(value)
            if endpoint.scheme:
                kwargs["endpoint_override"] = endpoint.netloc
                kwargs["scheme"] = endpoint.scheme
            else:
                kwargs["endpoint_override"] = value
        elif k == "aws_allow_http":
            if value.lower() == "true":
                kwargs.setdefault("scheme", "http")
        else:
            unknown.append(key)
    if unknown:
        raise InvalidArgumentError(
            f"unknown s3 storage option(s) {sorted(unknown)}; known: "
            f"{sorted([*_S3_OPTION_KEYS, 'aws_endpoint_url', 'aws_allow_http'])}"
        )
    return pafs.S3FileSystem(**kwargs)


class ObjectStoreFileIO(FileIO):
    """An object store through a ``pyarrow.fs`` filesystem.

    A whole object appears at once on PUT: ``write_atomic`` and ``open_output`` gather the
    bytes in memory and put them once complete, so a failed write publishes nothing (at the
    cost of holding the file in memory). There is no append (``supports_append`` is False: the WAL writes
    one object per group commit instead) and ``rename`` is copy + delete. ``create_exclusive``
    is check-then-put: memtier's master is the only timeline writer, so it never races.
    """

    supports_append = False
    atomic_rename = False

    def __init__(self, root: str, storage_options: Mapping[str, str] | None = None) -> None:
        super().__init__(root, storage_options)
        self._fs = _s3_filesystem(self.storage_options)
        self._prefix = f"{urlsplit(root).scheme}://"

    def _p(self, path: str) -> str:
        return path[len(self._prefix) :] if path.startswith(self._prefix) else path

    def _uri(self, native: str) -> str:
        return self._prefix + native

    def exists(self, path: str) -> bool:
        return self._fs.get_file_info(self._p(path)).type != pafs.FileType.NotFound

    def info(self, path: str) -> FileInfo:
        info = self._fs.get_file_info(self._p(path))
        if info.type == pafs.FileType.NotFound:
            raise NotFoundError(f"no such file: {path}")
        return self._to_info(info)

    def _to_info(self, info: pafs.FileInfo) -> FileInfo:
        mtime = info.mtime.timestamp() if info.mtime is not None else None
        return FileInfo(
            self._uri(info.path), info.size or 0, info.type == pafs.FileType.Directory, mtime
        )

    def _select(self, path: str, recursive: bool) -> list[pafs.FileInfo]:
        selector = pafs.FileSelector(self._p(path), allow_not_found=True, recursive=recursive)
        return self._fs.get_file_info(selector)

    def list_dir(self, path: str) -> list[FileInfo]:
        return sorted((self._to_info(i) for i in self._select(path, False)), key=lambda f: f.path)

    def list_files(self, path: str) -> list[FileInfo]:
        infos = self._select(path, True)
        files = [self._to_info(i) for i in infos if i.type == pafs.FileType.File]
        return sorted(files, key=lambda f: f.path)

    def read_bytes(self, path: str) -> bytes:
        try:
            with self._fs.open_input_stream(self._p(path)) as f:
                return f.read()
        except FileNotFoundError as e:
            raise NotFoundError(f"no such file: {path}") from e

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        with self.open_input(path) as f:
            return f.read_at(length, offset)

    def open_input(self, path: str) -> pa.NativeFile:
        try:
            return self._fs.open_input_file(self._p(path))
        except FileNotFoundError as e:
            raise NotFoundError(f"no such file: {path}") from e

    def write_atomic(self, path: str, data: Data) -> None:
        with self.open_output(path) as f:  # one object, published only when complete
            for piece in _pieces(data):
                f.write(piece)

    def create_exclusive(self, path: str, data: Data) -> None:
        if self.exists(path):
            raise AlreadyExistsError(f"already exists: {path}")
        self.write_atomic(path, data)

    @contextlib.contextmanager
    def open_output(self, path: str) -> Iterator[BinaryIO]:
        # The bytes gather in memory and go up only on success: pyarrow cannot abort an
        # upload it has started (closing the stream, even by garbage collection, completes
        # it), so an object is never opened for a write that may fail.
        buffer = pa.BufferOutputStream()
        yield buffer  # type: ignore[misc]
        data = buffer.getvalue()
        try:
            with self._fs.open_output_stream(self._p(path)) as stream:
                stream.write(data)
        except OSError as e:
            raise StorageError(f"cannot write {path}: {e}") from e

    def truncate(self, path: str, length: int) -> None:
        raise UnsupportedOperationError(f"object stores cannot truncate {path}")

    def rename(self, src: str, dst: str) -> None:
        self._fs.move(self._p(src), self._p(dst))

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._fs.delete_file(self._p(path))

    def delete_dir(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._fs.delete_dir(self._p(path))

    def makedirs(self, path: str) -> None:
        self._fs.create_dir(self._p(path), recursive=True)

    def arrow_fs(self, path: str) -> tuple[pafs.FileSystem, str]:
        return self._fs, self._p(path)


# ======================================================================================
# fsspec filesystems (memory:// for tests, and any other protocol fsspec knows)
# ======================================================================================


class _FsspecAppendFile(AppendFile):
    def __init__(self, path: str, handle: IO[bytes], size: int) -> None:
        self.path = path
        self._handle = handle
        self._size = size

    def write(self, data: bytes | memoryview) -> int:
        self._handle.write(bytes(data))
        self._size += len(data)
        return self._size

    def sync(self) -> None:
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()

    @property
    def size(self) -> int:
        return self._size


class FsspecFileIO(FileIO):
    """Any fsspec filesystem; ``memory://`` is the in-process store unit tests use."""

    def __init__(self, root: str, storage_options: Mapping[str, str] | None = None) -> None:
        import fsspec

        super().__init__(root, storage_options)
        self._protocol = urlsplit(root).scheme
        self._fs = fsspec.filesystem(self._protocol, **self._filesystem_options())
        self._lock = threading.Lock()  # makes check-then-create exclusive in-process

    def _filesystem_options(self) -> dict[str, Any]:
        """Keyword arguments for ``fsspec.filesystem``."""
        return dict(self.storage_options)

    def _p(self, path: str) -> str:
        return self._fs._strip_protocol(path)

    def _uri(self, native: str) -> str:
        return f"{self._protocol}://{native.lstrip('/')}"

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(self._p(path)))

    def info(self, path: str) -> FileInfo:
        try:
            return self._to_info(self._fs.info(self._p(path)))
        except FileNotFoundError as e:
            raise NotFoundError(f"no such file: {path}") from e

    def _to_info(self, entry: Mapping[str, Any]) -> FileInfo:
        mtime = entry.get("mtime") or entry.get("created")
        if mtime is not None and not isinstance(mtime, (int, float)):
            mtime = mtime.timestamp()
        return FileInfo(
            self._uri(entry["name"]), int(entry.get("size") or 0), entry["type"] == "directory",
            mtime,
        )

    def list_dir(self, path: str) -> list[FileInfo]:
        try:
            entries = self._fs.ls(self._p(path), detail=True)
        except FileNotFoundError:
            return []
        native = self._p(path).rstrip("/")
        infos = [self._to_info(e) for e in entries if e["name"].rstrip("/") != native]
        return sorted(infos, key=lambda f: f.path)

    def list_files(self, path: str) -> list[FileInfo]:
        try:
            found = self._fs.find(self._p(path), detail=True)
        except FileNotFoundError:
            return []
        return sorted((self._to_info(e) for e in found.values()), key=lambda f: f.path)

    def read_bytes(self, path: str) -> bytes:
        try:
            return bytes(self._fs.cat_file(self._p(path)))
        except FileNotFoundError as e:
            raise NotFoundError(f"no such file: {path}") from e

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        try:
            return bytes(self._fs.cat_file(self._p(path), start=offset, end=offset + length))
        except FileNotFoundError as e:
            raise NotFoundError(f"no such file: {path}") from e

    def open_input(self, path: str) -> pa.NativeFile:
        try:
            return pa.PythonFile(self._fs.open(self._p(path), "rb"), mode="r")
        except FileNotFoundError as e:
            raise NotFoundError(f"no such file: {path}") from e

    def write_atomic(self, path: str, data: Data) -> None:
        tmp = _temp_name(self._p(path))
        self._fs.pipe_file(tmp, b"".join(_pieces(data)))
        self._fs.mv(tmp, self._p(path))

    def create_exclusive(self, path: str, data: Data) -> None:
        with self._lock:
            if self.exists(path):
                raise AlreadyExistsError(f"already exists: {path}")
            self.write_atomic(path, data)

    @contextlib.contextmanager
    def open_output(self, path: str) -> Iterator[BinaryIO]:
        tmp = _temp_name(self._p(path))
        try:
            with self._fs.open(tmp, "wb") as f:
                yield f
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                self._fs.rm_file(tmp)
            raise
        self._fs.mv(tmp, self._p(path))

    def open_append(self, path: str) -> AppendFile:
        native = self._p(path)
        size = self._fs.size(native) if self._fs.exists(native) else 0
        return _FsspecAppendFile(path, self._fs.open(native, "ab"), size)

    def truncate(self, path: str, length: int) -> None:
        data = self.read_bytes(path)[:length]
        self.write_atomic(path, data)

    def rename(self, src: str, dst: str) -> None:
        self._fs.mv(self._p(src), self._p(dst))

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._fs.rm_file(self._p(path))

    def delete_dir(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._fs.rm(self._p(path), recursive=True)

    def makedirs(self, path: str) -> None:
        self._fs.makedirs(self._p(path), exist_ok=True)

    def arrow_fs(self, path: str) -> tuple[pafs.FileSystem, str]:
        return pafs.PyFileSystem(pafs.FSSpecHandler(self._fs)), self._p(path)


# ======================================================================================


def open_fileio(uri: str, storage_options: Mapping[str, str] | None = None) -> FileIO:
    """The FileIO for ``uri`` (a path or URI); ``storage_options`` configure the store."""
    if not isinstance(uri, str) or not uri:
        raise InvalidArgumentError(f"a storage path must be a non-empty string, got {uri!r}")
    scheme = urlsplit(uri).scheme
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        if storage_options:
            raise InvalidArgumentError(
                f"storage_options {sorted(storage_options)} do not apply to local path {uri}"
            )
        return LocalFileIO(uri)
    if scheme in ("s3", "s3a"):
        return ObjectStoreFileIO(uri, storage_options)
    if scheme == "hdfs":
        from memtier.hdfsio import HdfsFileIO

        return HdfsFileIO(uri, storage_options)
    try:
        return FsspecFileIO(uri, storage_options)
    except (ImportError, ValueError) as e:
        raise InvalidArgumentError(f"no filesystem for scheme {scheme!r} in {uri}: {e}") from e
