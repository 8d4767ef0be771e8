"""Where a WAL's bytes live, and what its files are called.

Filesystems that append (local disk, HDFS, ``memory://``) keep a WAL in one file, made
durable by fdatasync / hsync. Object stores cannot append: there a WAL is a prefix and each
group commit is one object ``<wal path>/<seq:012d>.wal`` (one PUT is one durable sync).
Object 0 holds the header; the WAL's bytes are its objects' bytes in sequence order.
"""

from __future__ import annotations

import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from memtier.errors import CorruptFileError, InvalidArgumentError, NotFoundError
from memtier.io import AppendFile, Data, FileInfo, FileIO, is_temp_file, join, parent
from memtier.wal.format import U64_MAX

__all__ = [
    "WalEntry",
    "WalFileName",
    "WalSink",
    "WalStorage",
    "list_logs",
    "list_wals",
    "wal_storage",
]

_NAME = re.compile(r"^(?P<file_group>[^/]+)\.(?P<block>[0-9a-f]{16})\.wal$")
_PART = re.compile(r"^(?P<seq>\d{12})\.wal$")


@dataclass(frozen=True)
class WalFileName:
    """``<file group>.<block id as 16 hex digits>.wal``: the name of one block's WAL."""

    file_group: str
    block_id: int

    def __post_init__(self) -> None:
        if not self.file_group or "/" in self.file_group or self.file_group.startswith("."):
            raise InvalidArgumentError(
                f"file group {self.file_group!r} cannot name a WAL file (empty, '/' or leading '.')"
            )
        if not 0 <= self.block_id <= U64_MAX:
            raise InvalidArgumentError(
                f"block id {self.block_id} is not an unsigned 64-bit integer"
            )

    @property
    def name(self) -> str:
        return f"{self.file_group}.{self.block_id:016x}.wal"

    @classmethod
    def parse(cls, name: str) -> WalFileName | None:
        """The WAL file name ``name`` spells, or None if it is not one."""
        match = _NAME.match(name)
        if match is None or is_temp_file(name) or name.startswith("."):
            return None
        return cls(match["file_group"], int(match["block"], 16))


@dataclass(frozen=True)
class WalEntry:
    """One WAL found by :func:`list_wals`."""

    path: str
    name: WalFileName
    size: int
    mtime: float | None  # last modification, seconds since the epoch


class WalSink(ABC):
    """The write side of one WAL. ``write`` is serialized by the caller; ``sync`` may run
    concurrently with it and makes at least everything written before it was called durable."""

    @abstractmethod
    def write(self, parts: Sequence[Any]) -> None:
        """Append the buffers in ``parts`` (bytes-like) in order."""

    @abstractmethod
    def sync(self) -> bool:
        """Make all writes so far durable; False if there was nothing to do."""

    def reopened(self) -> bool:
        """Whether a failed sync had the store open the file again (:attr:`AppendFile.reopened`)."""
        return False

    @abstractmethod
    def close(self) -> None: ...


class WalStorage(ABC):
    """One WAL on one FileIO."""

    def __init__(self, fileio: FileIO, path: str) -> None:
        self.fileio = fileio
        self.path = path

    @abstractmethod
    def create(self, header: Data) -> None:
        """Publish a new WAL holding ``header`` (or a whole WAL), durably, at once;
        AlreadyExistsError if it exists."""

    @abstractmethod
    def open_sink(self) -> WalSink:
        """Open the WAL for appends after its current end."""

    def create_sink(self, header: bytes) -> WalSink:
        """:meth:`create` a WAL holding ``header`` and :meth:`open_sink` it."""
        self.create(header)
        return self.open_sink()

    @abstractmethod
    def read(self) -> pa.Buffer:
        """All bytes of the WAL (memory-mapped, not copied, where the store allows)."""

    @abstractmethod
    def read_range(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``offset``."""

    @abstractmethod
    def read_ranges(self, ranges: Sequence[tuple[int, int]], *, synced: bool = False) -> list[pa.Buffer]:
        """The bytes of each ``(offset, length)`` range (fewer at the end); ``synced``:
        the caller knows every byte of them synced (:meth:`FileIO.read_ranges`)."""

    @abstractmethod
    def size(self) -> int: ...

    @abstractmethod
    def truncate(self, length: int) -> None:
        """Cut the WAL to ``length`` bytes, durably."""

    @abstractmethod
    def delete(self) -> None: ...


def wal_storage(fileio: FileIO, path: str) -> WalStorage:
    """The layout ``fileio`` needs: one file, or one object per commit."""
    return FileStorage(fileio, path) if fileio.supports_append else ObjectStorage(fileio, path)


def list_logs(fileio: FileIO, root: str) -> list[FileInfo]:
    """Every log below ``root`` (recursively; a file, or on object stores a prefix of
    numbered objects) as one entry with its total size and last modification."""
    files = fileio.list_files(root)
    if fileio.supports_append:
        return files
    groups: dict[str, list[FileInfo]] = {}
    for f in files:
        if _PART.match(f.name):
            groups.setdefault(parent(f.path), []).append(f)
    return [
        FileInfo(
            path,
            sum(i.size for i in infos),
            False,
            max((i.mtime for i in infos if i.mtime is not None), default=None),
        )
        for path, infos in sorted(groups.items())
    ]


def list_wals(fileio: FileIO, root: str) -> list[WalEntry]:
    """Every block file below ``root`` (recursively), sorted by path."""
    entries = []
    for info in list_logs(fileio, root):
        name = WalFileName.parse(info.name)
        if name is not None:
            entries.append(WalEntry(info.path, name, info.size, info.mtime))
    return entries


# ======================================================================================
# One appendable file
# ======================================================================================


#: Synced bytes a file sink lets accumulate in the page cache before dropping them.
DROP_CACHE_BYTES = 4 << 20


class _FileSink(WalSink):
    """Appends and syncs in place. The block holds its frames in memory, so synced WAL
    pages are dropped from the page cache rather than left to crowd out memory: once the
    cache filled, reclaiming them made each 1 MB write take 4.3 ms instead of 0.27 ms, and
    16 writers of 1 MB went from ~250 to ~1000 MB/s (bench/RESULTS.md). Only pages synced
    by an earlier sync are dropped: the newest still sit in per-CPU batches, and dropping
    those makes the kernel drain every CPU's batches first."""

    def __init__(self, file: AppendFile) -> None:
        self._file = file
        self._synced = 0  # end of the previous sync
        self._dropped = 0

    def write(self, parts: Sequence[Any]) -> None:
        self._file.writev(parts)

    def reopened(self) -> bool:
        return self._file.reopened

    def sync(self) -> bool:
        end = self._file.size  # every write finished before the sync starts is covered
        self._file.sync()
        if self._synced - self._dropped >= DROP_CACHE_BYTES:
            self._file.drop_cache(self._synced)
            self._dropped = self._synced
        self._synced = end
        return True

    def close(self) -> None:
        self._file.close()


class FileStorage(WalStorage):
    """A WAL in one file, appended to and synced in place."""

    def create(self, header: Data) -> None:
        self.fileio.create_exclusive(self.path, header)

    def open_sink(self) -> WalSink:
        return _FileSink(self.fileio.open_append(self.path))

    def create_sink(self, header: bytes) -> WalSink:
        return _FileSink(self.fileio.create_append(self.path, header))

    def read(self) -> pa.Buffer:
        mapped = self.fileio.mmap(self.path)
        return pa.py_buffer(mapped if mapped is not None else self.fileio.read_bytes(self.path))

    def read_ranges(self, ranges: Sequence[tuple[int, int]], *, synced: bool = False) -> list[pa.Buffer]:
        return [pa.py_buffer(data) for data in self.fileio.read_ranges(self.path, ranges, synced=synced)]

    def read_range(self, offset: int, length: int) -> bytes:
        return self.fileio.read_range(self.path, offset, length)

    def size(self) -> int:
        return self.fileio.info(self.path).size

    def truncate(self, length: int) -> None:
        self.fileio.truncate(self.path, length)

    def delete(self) -> None:
        self.fileio.delete(self.path)


# ======================================================================================
# One object per group commit
# ======================================================================================


def _part_path(path: str, seq: int) -> str:
    return join(path, f"{seq:012d}.wal")


class _ObjectSink(WalSink):
    def __init__(self, fileio: FileIO, path: str, next_seq: int) -> None:
        self._fileio = fileio
        self._path = path
        self._seq = next_seq
        self._pending: list[Any] = []
        self._lock = threading.Lock()  # write() and sync() may run at once

    def write(self, parts: Sequence[Any]) -> None:
        with self._lock:
            self._pending.extend(parts)

    def sync(self) -> bool:
        with self._lock:
            parts, self._pending = self._pending, []
        if not parts:
            return False
        # Only one sync runs at a time (the writer's leader), so objects appear in order.
        self._fileio.write_atomic(_part_path(self._path, self._seq), b"".join(parts))
        self._seq += 1
        return True

    def close(self) -> None:
        self._pending = []


class ObjectStorage(WalStorage):
    """A WAL as numbered objects under a prefix; the newest object is its tail."""

    def _parts(self) -> list[FileInfo]:
        parts = [f for f in self.fileio.list_files(self.path) if _PART.match(f.name)]
        if not parts:
            raise NotFoundError(f"no such WAL: {self.path}")
        offset = 0
        for seq, part in enumerate(parts):
            if part.name != f"{seq:012d}.wal":
                raise CorruptFileError(self.path, offset, f"object {seq:012d}.wal is missing")
            offset += part.size
        return parts

    def create(self, header: Data) -> None:
        self.fileio.create_exclusive(_part_path(self.path, 0), header)

    def open_sink(self) -> WalSink:
        return _ObjectSink(self.fileio, self.path, len(self._parts()))

    def read(self) -> pa.Buffer:
        return pa.py_buffer(b"".join(self.fileio.read_bytes(p.path) for p in self._parts()))

    def read_ranges(self, ranges: Sequence[tuple[int, int]], *, synced: bool = False) -> list[pa.Buffer]:
        data = self.read()  # one listing of the objects, then slices
        starts = [min(offset, data.size) for offset, _ in ranges]
        return [data.slice(start, min(length, data.size - start)) for start, (_, length) in zip(starts, ranges, strict=True)]

    def read_range(self, offset: int, length: int) -> bytes:
        out = []
        start = 0
        for part in self._parts():
            lo, hi = max(offset, start), min(offset + length, start + part.size)
            if lo < hi:
                out.append(self.fileio.read_range(part.path, lo - start, hi - lo))
            start += part.size
        return b"".join(out)

    def size(self) -> int:
        return sum(p.size for p in self._parts())

    def truncate(self, length: int) -> None:
        parts = self._parts()
        starts = [sum(p.size for p in parts[:i]) for i in range(len(parts))]
        # Newest first, so the objects left are always a gap-free prefix.
        for part, start in reversed(list(zip(parts, starts, strict=True))):
            if start >= length:
                self.fileio.delete(part.path)
            elif start + part.size > length:
                self.fileio.write_atomic(
                    part.path, self.fileio.read_bytes(part.path)[: length - start]
                )

    def delete(self) -> None:
        self.fileio.delete_dir(self.path)
