"""Reading WALs for the read path: a block's frames as Arrow, sealed or still being written.

On local disk the file is memory-mapped and every batch references the mapping, so nothing
is copied; other stores read the bytes once and batches reference that buffer. Reading
never modifies the file: an incomplete last record (an append in flight, or a torn tail
not yet recovered) is reported in ``tail`` and skipped.
"""

from __future__ import annotations

import pyarrow as pa

from memtier.errors import CorruptFileError
from memtier.io import FileIO
from memtier.wal.format import (
    HEADER_PREFIX_SIZE,
    SEAL_RECORD_SIZE,
    WalContents,
    WalHeader,
    WalSeal,
    check_schema,
    decode_header,
    decode_seal_record,
    decode_wal,
    header_length,
)
from memtier.wal.storage import wal_storage

__all__ = ["read_header", "read_seal", "read_wal"]


def read_wal(
    fileio: FileIO,
    path: str,
    *,
    end: int | None = None,
    schema: pa.Schema | None = None,
) -> WalContents:
    """Every intact record of the WAL at ``path``.

    ``end`` limits the read to the first ``end`` bytes: pass a live writer's
    ``durable_size`` to see only acknowledged frames. ``schema`` is the schema the caller
    expects; a WAL with another raises :class:`SchemaMismatchError`.
    """
    data = wal_storage(fileio, path).read()
    if end is not None:
        if end > data.size:
            raise CorruptFileError(path, data.size, f"the WAL ends before its durable size {end}")
        data = data.slice(0, end)
    contents = decode_wal(data, path)
    if schema is not None:
        check_schema(
            schema, contents.header.schema, f"the schema of WAL {path}", "the expected schema"
        )
    return contents


def read_header(fileio: FileIO, path: str) -> WalHeader:
    """Only the header of a WAL (two small reads)."""
    storage = wal_storage(fileio, path)
    length = header_length(storage.read_range(0, HEADER_PREFIX_SIZE), path)
    return decode_header(pa.py_buffer(storage.read_range(0, length)), path)[0]


def read_seal(fileio: FileIO, path: str, header: WalHeader) -> WalSeal | None:
    """The seal record if the WAL ends with one, else None (one small read)."""
    storage = wal_storage(fileio, path)
    size = storage.size()
    if size < SEAL_RECORD_SIZE:
        return None
    return decode_seal_record(
        storage.read_range(size - SEAL_RECORD_SIZE, SEAL_RECORD_SIZE), header.crc_seed
    )
