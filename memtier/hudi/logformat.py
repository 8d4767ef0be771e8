"""Hudi log file blocks: bytes in, bytes out (log format version 1, block content version 3).

A log file is a run of blocks (all integers big-endian)::

    "#HUDI#"  int64 blockLength  int32 formatVersion=1  int32 blockType
    header    int64 contentLength  content  footer  int64 totalBlockSize

``blockLength`` counts the bytes after itself; ``totalBlockSize`` = 6 + ``blockLength``;
header and footer are ``int32 n`` then ``n`` x (``int32 key``, ``int32 length``, UTF-8).
Reading follows Hudi's readers: a block whose length runs past the end of the data, whose
trailing size disagrees, or that is followed by neither another magic nor the end of the
data is CORRUPT, and the scan resumes at the next magic.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType

import pyarrow as pa
import pyarrow.parquet as pq
import pyarrow.types as pat

from memtier.errors import (
    CorruptFileError,
    InvalidArgumentError,
    SchemaMismatchError,
    UnknownFormatVersionError,
    UnsupportedTableError,
)
from memtier.hudi.avro import (
    avro_to_arrow_schema,
    decode_framed,
    encode_framed,
)
from memtier.hudi.deleterecords import decode_delete_records, encode_delete_records
from memtier.hudi.parquetfile import write_parquet

__all__ = [
    "MAGIC",
    "BlockType",
    "HeaderKey",
    "LogBlock",
    "avro_data_block",
    "delete_block",
    "hfile_data_block",
    "iter_blocks",
    "parquet_data_block",
    "read_data_block",
    "read_delete_block",
    "rollback_block",
]

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1
CONTENT_VERSION = 3  # Avro data and delete block content, as Hudi 0.14+ writes it


class BlockType(IntEnum):
    COMMAND = 0
    DELETE = 1
    CORRUPT = 2
    AVRO_DATA = 3
    HFILE_DATA = 4
    PARQUET_DATA = 5
    CDC_DATA = 6


class HeaderKey(IntEnum):
    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4
    RECORD_POSITIONS = 5
    BLOCK_IDENTIFIER = 6
    IS_PARTIAL = 7
    BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS = 8


ROLLBACK = "0"  # COMMAND_BLOCK_TYPE of a rollback command block


@dataclass(frozen=True)
class LogBlock:
    """One block of a log file. ``offset`` and ``size`` span the whole block in the file
    (for CORRUPT, the bad span, which is also the content); ``path`` names the file."""

    block_type: BlockType
    header: Mapping[HeaderKey, str]
    content: memoryview
    offset: int
    size: int
    path: str = ""

    @property
    def instant_time(self) -> str | None:
        return self.header.get(HeaderKey.INSTANT_TIME)

    @property
    def target_instant_time(self) -> str | None:
        return self.header.get(HeaderKey.TARGET_INSTANT_TIME)

    @property
    def schema(self) -> dict | None:
        """The writer's Avro schema (with meta fields) from the SCHEMA header."""
        text = self.header.get(HeaderKey.SCHEMA)
        return None if text is None else json.loads(text)

    @property
    def where(self) -> str:
        return f"{self.path} (log block at byte {self.offset})"


# ---------------------------------------------------------------------------------------
# Reading blocks
# ---------------------------------------------------------------------------------------

_SEARCH = 1 << 20  # bytes searched for the next magic at a time


def _next_magic(view: memoryview, start: int) -> int:
    """Offset of the first magic at or after ``start``, or the end of ``view``."""
    at = start
    while at < len(view):
        window = bytes(view[at : at + _SEARCH + len(MAGIC) - 1])
        found = window.find(MAGIC)
        if found >= 0:
            return at + found
        at += _SEARCH
    return len(view)


class _Garbled(Exception):
    """A block's insides do not add up (the block is reported CORRUPT)."""


def _metadata(view: memoryview, at: int, end: int) -> tuple[dict[HeaderKey, str], int]:
    """A header or footer map at ``at``; returns it and the offset after it."""
    if at + 4 > end:
        raise _Garbled
    (count,) = struct.unpack_from(">i", view, at)
    at += 4
    if count < 0:
        raise _Garbled
    entries = {}
    for _ in range(count):
        if at + 8 > end:
            raise _Garbled
        key, length = struct.unpack_from(">ii", view, at)
        at += 8
        if length < 0 or at + length > end or key not in HeaderKey._value2member_map_:
            raise _Garbled
        try:
            entries[HeaderKey(key)] = bytes(view[at : at + length]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise _Garbled from e
        at += length
    return entries, at


def _framed(view: memoryview, at: int) -> int | None:
    """The size of the block at ``at`` if its framing holds (length inside the data,
    trailing size matching, then a magic or less than one magic's worth of bytes), else
    None."""
    if at + 14 > len(view):
        return None
    (length,) = struct.unpack_from(">q", view, at + 6)
    end = at + 14 + length
    if length < 28 or end > len(view):  # version, type, empty maps, two lengths
        return None
    (total,) = struct.unpack_from(">q", view, end - 8)
    if total != 6 + length:
        return None
    if len(view) - end >= len(MAGIC) and view[end : end + len(MAGIC)] != MAGIC:
        return None
    return 14 + length


def _parse(view: memoryview, at: int, size: int, path: str) -> LogBlock:
    """The block at ``at`` whose framing holds; raises _Garbled if its insides do not."""
    end = at + size - 8
    version, kind = struct.unpack_from(">ii", view, at + 14)
    if version != LOG_FORMAT_VERSION:
        raise UnknownFormatVersionError(
            f"{path}: the log block at byte {at} has log format version {version}; "
            f"this build reads version {LOG_FORMAT_VERSION}"
        )
    if kind not in BlockType._value2member_map_ or kind == BlockType.CORRUPT:
        raise _Garbled
    header, pos = _metadata(view, at + 22, end)
    if pos + 8 > end:
        raise _Garbled
    (content_length,) = struct.unpack_from(">q", view, pos)
    pos += 8
    if content_length < 0 or pos + content_length > end:
        raise _Garbled
    content = view[pos : pos + content_length]
    _, pos = _metadata(view, pos + content_length, end)
    if pos != end:
        raise _Garbled
    return LogBlock(BlockType(kind), MappingProxyType(header), content, at, size, path)


def iter_blocks(data: bytes | memoryview, path: str) -> Iterator[LogBlock]:
    """The blocks of a log file's bytes, in order. A truncated or garbled block comes out
    as one CORRUPT block over the bad span, and the scan resumes at the next magic.

    Raises UnknownFormatVersionError for a well-framed block of another format version.
    """
    view = memoryview(data).cast("B")
    at = 0
    while at < len(view):
        size = _framed(view, at) if view[at : at + len(MAGIC)] == MAGIC else None
        if size is not None:
            try:
                yield _parse(view, at, size, path)
                at += size
                continue
            except _Garbled:
                pass
        bad_end = _next_magic(view, at + 1)
        yield LogBlock(
            BlockType.CORRUPT, MappingProxyType({}), view[at:bad_end], at, bad_end - at, path
        )
        at = bad_end


# ---------------------------------------------------------------------------------------
# Writing blocks
# ---------------------------------------------------------------------------------------


def _metadata_bytes(entries: Mapping[HeaderKey, str]) -> bytes:
    parts = [struct.pack(">i", len(entries))]
    for key in sorted(entries):
        value = entries[key].encode("utf-8")
        parts.append(struct.pack(">ii", int(key), len(value)) + value)
    return b"".join(parts)


_FOOTER = _metadata_bytes({})


def _block_head(kind: BlockType, header: Mapping[HeaderKey, str], content_length: int) -> bytes:
    """Everything of a block before its content."""
    entries = _metadata_bytes(header)
    length = 4 + 4 + len(entries) + 8 + content_length + len(_FOOTER) + 8
    return (
        MAGIC
        + struct.pack(">qii", length, LOG_FORMAT_VERSION, int(kind))
        + entries
        + struct.pack(">q", content_length)
    )


def _block_tail(head_length: int, content_length: int) -> bytes:
    """Everything of a block after its content: the (empty) footer and the block's size
    up to the size itself."""
    return _FOOTER + struct.pack(">q", head_length + content_length + len(_FOOTER))


def _block(kind: BlockType, header: Mapping[HeaderKey, str], content: bytes) -> bytes:
    head = _block_head(kind, header, len(content))
    return head + content + _block_tail(len(head), len(content))


def _data_header(schema: dict, instant: str) -> dict[HeaderKey, str]:
    """The header of a data or delete block: its instant and the writer's Avro schema
    (compact JSON, as Avro's Schema.toString writes it)."""
    return {
        HeaderKey.INSTANT_TIME: instant,
        HeaderKey.SCHEMA: json.dumps(schema, separators=(",", ":")),
    }


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns and types (absent ones null)."""
    columns = []
    for field in schema:
        if field.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table.column(field.name)
        if pat.is_dictionary(column.type) and column.type.value_type == field.type:
            columns.append(column)  # constant meta columns stay dictionaries in Parquet
            continue
        try:
            columns.append(column if column.type == field.type else column.cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise SchemaMismatchError(
                f"column {field.name!r}: {column.type} does not fit {field.type}: {e}"
            ) from e
    return pa.Table.from_arrays(columns, names=schema.names)


def avro_data_block(records: pa.Table, avro_schema_with_meta: dict, instant: str) -> pa.Buffer:
    """An AVRO_DATA block of ``records`` (meta columns included), written as Hudi does:
    content version 3, the record count, then each record as int32 length + Avro datum.

    Returns the block as one ``pyarrow.Buffer`` (bytes-like: write it as it is), laid
    out in a single pass without a copy into ``bytes``.
    """
    header = _data_header(avro_schema_with_meta, instant)
    counts = struct.pack(">ii", CONTENT_VERSION, records.num_rows)
    head_length = len(_block_head(BlockType.AVRO_DATA, header, 0)) + len(counts)

    def head(size: int) -> bytes:
        return _block_head(BlockType.AVRO_DATA, header, len(counts) + size) + counts

    def tail(size: int) -> bytes:
        return _block_tail(head_length - len(counts), len(counts) + size)

    return encode_framed(records, avro_schema_with_meta, head, tail)


def parquet_data_block(records: pa.Table, avro_schema_with_meta: dict, instant: str) -> bytes:
    """A PARQUET_DATA block: the content is one whole Parquet file (snappy) of
    ``records`` with the columns and types of ``avro_schema_with_meta``."""
    table = _conformed(records, avro_to_arrow_schema(avro_schema_with_meta))
    sink = pa.BufferOutputStream()
    write_parquet(table, sink)
    header = _data_header(avro_schema_with_meta, instant)
    return _block(BlockType.PARQUET_DATA, header, sink.getvalue().to_pybytes())


def hfile_data_block(hfile: bytes, avro_schema_with_meta: dict, instant: str) -> bytes:
    """An HFILE_DATA block (Hudi's metadata table): the content is one whole HFile
    (:mod:`memtier.hudi.hfile`) whose values are records of ``avro_schema_with_meta``."""
    return _block(BlockType.HFILE_DATA, _data_header(avro_schema_with_meta, instant), hfile)


def delete_block(
    record_keys: pa.Array,
    partition_paths: pa.Array,
    instant: str,
    avro_schema_with_meta: dict,
    ordering_type: pa.DataType | None,
    ordering_values: pa.Array | None = None,
) -> bytes:
    """A DELETE block of the given keys (:mod:`memtier.hudi.deleterecords`: Hudi 1.0's
    layout), each delete with its ``ordering_values`` entry (readers then keep a record
    of a greater ordering value), or in commit order where none is given."""
    datum = encode_delete_records(record_keys, partition_paths, ordering_type, ordering_values)
    content = struct.pack(">ii", CONTENT_VERSION, len(datum)) + datum
    return _block(BlockType.DELETE, _data_header(avro_schema_with_meta, instant), content)


def rollback_block(instant: str, target_instant: str) -> bytes:
    """A COMMAND block telling readers to drop every block of ``target_instant``."""
    header = {
        HeaderKey.INSTANT_TIME: instant,
        HeaderKey.TARGET_INSTANT_TIME: target_instant,
        HeaderKey.COMMAND_BLOCK_TYPE: ROLLBACK,
    }
    return _block(BlockType.COMMAND, header, b"")


# ---------------------------------------------------------------------------------------
# Reading block contents
# ---------------------------------------------------------------------------------------


def _content_version(block: LogBlock) -> None:
    """Refuses content of a version other than 3, the one every reader in scope reads."""
    if len(block.content) < 4:
        raise CorruptFileError(block.path, block.offset, "block content is cut off")
    (version,) = struct.unpack_from(">i", block.content, 0)
    if version != CONTENT_VERSION:
        raise UnknownFormatVersionError(
            f"{block.where}: {block.block_type.name} content version {version}; "
            f"this build reads version {CONTENT_VERSION}"
        )


def read_data_block(block: LogBlock, arrow_schema: pa.Schema | None = None) -> pa.Table:
    """The records of an AVRO_DATA or PARQUET_DATA block, meta columns included;
    ``arrow_schema`` fixes the columns and types (absent ones null, extra ones dropped).
    Partial updates (Hudi 1.x's ``IS_PARTIAL`` blocks, some columns of each record) are
    refused: merging them takes the columns the block leaves out from older versions."""
    if block.header.get(HeaderKey.IS_PARTIAL, "false").strip().lower() == "true":
        raise UnsupportedTableError(
            f"{block.where}: a partial-update block (Hudi's IS_PARTIAL, written with"
            " hoodie.write.partial.update.mode); memtier reads log blocks of whole records only"
        )
    if block.block_type == BlockType.PARQUET_DATA:
        table = pq.read_table(pa.BufferReader(pa.py_buffer(block.content)))
        return table if arrow_schema is None else _conformed(table, arrow_schema)
    if block.block_type != BlockType.AVRO_DATA:
        raise InvalidArgumentError(
            f"{block.where}: a {block.block_type.name} block holds no records"
        )
    schema = block.schema
    if schema is None:
        raise CorruptFileError(block.path, block.offset, "Avro data block without a SCHEMA header")
    _content_version(block)
    if len(block.content) < 8:
        raise CorruptFileError(block.path, block.offset, "Avro data block content is cut off")
    (count,) = struct.unpack_from(">i", block.content, 4)
    if count < 0:
        raise CorruptFileError(block.path, block.offset, f"Avro data block of {count} records")
    records = pa.py_buffer(block.content)[8:]
    return decode_framed(records, count, schema, arrow_schema, source=block.where)


def read_delete_block(block: LogBlock, ordering_type: pa.DataType | None = None) -> pa.Table:
    """The deleted keys of a DELETE block: ``record_key`` and ``partition_path`` strings
    and ``ordering_val`` (:func:`~memtier.hudi.deleterecords.decode_delete_records`, which
    also reads the layout memtier once wrote for an ordering field of ``ordering_type``)."""
    if block.block_type != BlockType.DELETE:
        raise InvalidArgumentError(
            f"{block.where}: a {block.block_type.name} block holds no deletes"
        )
    _content_version(block)
    if len(block.content) < 8:
        raise CorruptFileError(block.path, block.offset, "delete block content is cut off")
    (length,) = struct.unpack_from(">i", block.content, 4)
    datum = bytes(block.content[8 : 8 + length])
    if length < 0 or len(datum) != length:
        raise CorruptFileError(block.path, block.offset, f"delete block length {length} is wrong")
    try:
        return decode_delete_records(datum, ordering_type)
    except ValueError as e:
        raise CorruptFileError(block.path, block.offset, f"delete records do not decode: {e}") from e
