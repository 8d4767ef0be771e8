"""Any filesystem fsspec knows (``memory://`` for tests included)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import IO, Any, BinaryIO
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

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
)


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
