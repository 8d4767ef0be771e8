"""Object stores through ``pyarrow.fs`` (S3 and S3-compatible servers): no append; a
whole-object PUT is the atomic, durable unit."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO
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
from memtier.io.base import (
    Data,
    FileInfo,
    FileIO,
    _pieces,
)

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
