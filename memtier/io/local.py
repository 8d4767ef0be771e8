"""The local disk: os calls, fsync, rename, hard links; reads that can yield to writers
(:func:`read_gently`)."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from memtier.diskpacing import PacedFile, trickle_unlink
from memtier.errors import (
    AlreadyExistsError,
    NotFoundError,
)
from memtier.io.base import (
    AppendFile,
    Data,
    FileInfo,
    FileIO,
    _pieces,
    _temp_name,
    join,
)


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

    def free_bytes(self, path: str) -> int | None:
        local = _local_path(path)
        while not os.path.exists(local) and os.path.dirname(local) != local:
            local = os.path.dirname(local)
        stat = os.statvfs(local)
        return stat.f_bavail * stat.f_frsize

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

    def read_ranges(
        self, path: str, ranges: Sequence[tuple[int, int]], *, synced: bool = False
    ) -> list[bytes | bytearray]:
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

    def _publish(self, tmp: str, path: str, exclusive: bool, durable: bool = True) -> None:
        """Move a fully written temp file into place (durably, unless not ``durable``)."""
        local = _local_path(path)
        try:
            if durable:
                _fsync_path(tmp)
            if exclusive:
                try:
                    os.link(tmp, local)
                except FileExistsError as e:
                    raise AlreadyExistsError(f"already exists: {path}") from e
            else:
                os.replace(tmp, local)
            if durable:
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

    def write_marker(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        if exclusive and os.path.exists(_local_path(path)):
            raise AlreadyExistsError(f"already exists: {path}")
        self._publish(self._write_temp(path, data), path, exclusive=exclusive, durable=False)

    def sync_dir(self, path: str) -> None:
        _fsync_dir(_local_path(path))

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
