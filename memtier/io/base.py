"""What every storage backend offers (:class:`FileIO`, :class:`AppendFile`), and the
path and temporary-file helpers they share."""

from __future__ import annotations

import contextlib
import posixpath
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from memtier.errors import (
    InvalidArgumentError,
    UnsupportedOperationError,
)

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
    #: Whether a failed sync made the store open the file again (HDFS: lease recovery and
    #: an append under a new pipeline) and carry on: further appends to it are riskier
    #: than to a new file (see :mod:`memtier.io.hdfs`), so a log goes on in a new one.
    reopened: bool = False

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

    def free_bytes(self, path: str) -> int | None:
        """Bytes free to an unprivileged writer on the file system holding ``path`` (or
        its nearest existing parent); None where the store does not say."""
        return None

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

    def read_ranges(
        self, path: str, ranges: Sequence[tuple[int, int]], *, synced: bool = False
    ) -> list[bytes | bytearray]:
        """The bytes of each ``(offset, length)`` range of a file (fewer at its end).
        ``synced``: the caller knows every byte of the ranges was written and synced (a
        WAL's acknowledged frames), so a store whose view of a file still open can lag
        (HDFS) must serve them all or fail, never answer short."""
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

    def write_marker(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        """Publish a small file that no crash must keep (a lock, a heartbeat) all at once,
        durably where that costs nothing more (:class:`AlreadyExistsError` if ``exclusive``
        and it exists). On a local disk neither the file nor its folder is synced: an
        empty one becomes durable at the next :meth:`sync_dir` of its folder."""
        if exclusive:
            self.create_exclusive(path, data)
        else:
            self.write_atomic(path, data)

    def sync_dir(self, path: str) -> None:  # noqa: B027 - a no-op where every create is durable
        """Make the names of the files published in folder ``path`` so far durable (those
        :meth:`write_marker` left unsynced; a file's content only if it was synced or is
        empty). A no-op where a create is durable when it returns (HDFS, object stores)."""

    @abstractmethod
    def open_output(self, path: str) -> contextlib.AbstractContextManager[BinaryIO]:
        """A stream whose bytes appear at ``path`` atomically and durably on clean exit.

        On an exception nothing is published and temporary files are removed.
        """

    def open_append(self, path: str) -> AppendFile:
        """Open (creating if needed) ``path`` for durable appends."""
        raise UnsupportedOperationError(f"{type(self).__name__} cannot append to {path}")

    def create_append(self, path: str, head: bytes) -> AppendFile:
        """Create ``path`` holding ``head`` (:class:`AlreadyExistsError` if it exists),
        ``head`` durable on return, and keep it open for appends after it."""
        self.create_exclusive(path, head)
        return self.open_append(path)

    @abstractmethod
    def truncate(self, path: str, length: int) -> None:
        """Cut the file to ``length`` bytes, durably."""

    def recover_lease(self, path: str, timeout: float = 60.0) -> None:  # noqa: B027 - no-op by default
        """Take a file that another writer (a process that died, or one being fenced off)
        left open away from it, at the length its syncs made durable: HDFS lease recovery
        (:mod:`memtier.io.hdfs`). A no-op where files have no leases."""

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
        return (type(self), (self.root, self.storage_options))


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
