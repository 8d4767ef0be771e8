"""The only storage entry point: a small FileIO over the local disk, pyarrow.fs and fsspec.

``open_fileio(uri)`` picks a backend by scheme:

* plain paths and ``file://`` -> :class:`LocalFileIO` (os calls, fsync, rename, hard links);
* ``s3://`` -> :class:`ObjectStoreFileIO` over ``pyarrow.fs.S3FileSystem`` (no append; a
  whole-object PUT is the atomic, durable unit);
* ``hdfs://`` -> :class:`~memtier.io.hdfs.HdfsFileIO` over the ``hdfs-native`` client
  (append, hsync, lease recovery; how it meets HDFS's semantics: :mod:`memtier.io.hdfs`);
* anything else fsspec knows, ``memory://`` for tests included -> :class:`FsspecFileIO`.

Every backend offers the same operations: whole-file atomic publish (``write_atomic``,
``open_output``), create-if-absent (``create_exclusive``) for timeline files, durable
appends (``open_append``) where the store has them, listing, ranged reads, and a
``pyarrow.fs`` view for Parquet. Paths are the caller's URIs; each backend maps them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from memtier.errors import InvalidArgumentError
from memtier.io.base import (
    ORPHAN_AGE_S,
    AppendFile,
    Data,
    FileInfo,
    FileIO,
    basename,
    is_temp_file,
    join,
    parent,
    relpath,
    sweep_temp_files,
)
from memtier.io.fsspecstore import FsspecFileIO
from memtier.io.local import GENTLE_READ_BYTES, GentleFile, LocalFileIO, read_gently
from memtier.io.objectstore import ObjectStoreFileIO

__all__ = [
    "GENTLE_READ_BYTES",
    "ORPHAN_AGE_S",
    "AppendFile",
    "Data",
    "FileIO",
    "FileInfo",
    "FsspecFileIO",
    "GentleFile",
    "LocalFileIO",
    "ObjectStoreFileIO",
    "basename",
    "is_temp_file",
    "join",
    "open_fileio",
    "parent",
    "read_gently",
    "relpath",
    "sweep_temp_files",
]


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
        from memtier.io.hdfs import HdfsFileIO  # hdfs-native, the [hdfs] extra

        return HdfsFileIO(uri, storage_options)
    try:
        return FsspecFileIO(uri, storage_options)
    except (ImportError, ValueError) as e:
        raise InvalidArgumentError(f"no filesystem for scheme {scheme!r} in {uri}: {e}") from e
