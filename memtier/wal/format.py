"""The WAL format: bytes <-> header, frames and seal, each checked by CRC32C. No I/O.

A WAL file is either a *block file*, holding one in-memory block, or a *stream* segment,
holding the frames of many blocks of one table written by one table server (so one sync
makes a write to many file groups durable, see :mod:`memtier.wal.stream`). Its bytes (a
file; on object stores the concatenation of its objects in order) are a header followed
by records; integers are little-endian::

    header  0  8s  magic b"\\x89MTWAL\\r\\n"
            8  u16 format version (3; versions 1 (block files only) and 2 (no rows and
                   selection records) are still read)
           10  u16 file kind: 0 = block file, 1 = stream (0 in version 1)
           12  u32 body length (a multiple of 8)
           16  u32 0
           20  u32 CRC32C of bytes 8..20 and the body
           24      body: file id (16 bytes), block id u64, created ms i64, then table,
                   partition and file group (u32 length + UTF-8 each) and the Arrow schema
                   (u32 length + IPC schema message), zero-padded to 8 bytes. A stream's
                   header names its writer in the file group and has an empty schema.

    record  0  4s  magic b"MTWR"
            4  u32 CRC32C of bytes 8..64, seeded with the CRC32C of the file id
            8  u8  kind: 1 = frame, 2 = seal, 3 = block, 4 = rows, 5 = selection (3-5:
                   streams only)
            9  3x  0
           12  u32 payload length (a multiple of 8)
           16  u32 CRC32C of the payload
           20  u32 block reference: in a stream, the number a block record gave the block
                   the frame belongs to; 0 in block files (and in version 1)
           24  u64 sync mark: how many bytes of this WAL were durable when it was written
           32  u64 transaction id
           40  16s producer id
           56  u64 producer sequence
           64      payload: an Arrow IPC record-batch message (frame, rows), the seal
                   body: frame count u64, row count u64, sealed ms i64 (seal), a block
                   file's header body (block: declares the block before its first frame
                   in each stream segment), or a selection (below)

A write touching several blocks is one *rows* record (block reference 0: the write's batch
as it came) followed by one *selection* record per block: that block's frame, the rows of
the batch it holds. Its payload::

    selection  0  u64 bytes from the rows record's start to this record's start
               8  u32 row count
              12  u32 first row of a run, or 0xFFFFFFFF: the rows' positions follow
              16      positions: u32 each, ascending, zero-padded to 8 bytes

so the batch is serialized and checked once for all the blocks of the write, and no end
of the write reorders its rows (format version 3). A frame of a block (its
:class:`WalFrame`) is then known by the rows record's offset and the length up to the end
of its selection record.

Ids: the transaction id is an unsigned 64-bit number the master allocates; the producer id
is 16 bytes the client chooses (a UUID's bytes; a u64 client id as ``n.to_bytes(16, "big")``);
the producer sequence is an unsigned 64-bit number that increases per producer.

In a stream every record header but a rows record's names its block, so each block's frames
are recovered on their own: a frame whose payload is damaged fails only its block (a rows
record whose payload is damaged fails the blocks whose selections take rows of it). A record header (or a
block record's payload) with one flipped bit is repaired from its CRC32C (which tells any
single-bit error in a few hundred bytes apart); a header damaged beyond that names no
block, so the blocks that may have lost a frame to it fail, and the others are exact (see
:func:`decode_stream`).

Every byte is covered by a check, so a torn or damaged record is always detected. Records
are 8-byte aligned, so Arrow reads batches straight out of a memory-mapped file. The
sync mark tells a torn tail from damage: bytes after the last good record are a torn
tail (unacknowledged, safe to cut off) unless a later intact record says they had
already been made durable when it was written; then the file is corrupt.
"""

from __future__ import annotations

import enum
import functools
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import crc32c
import numpy as np
import pyarrow as pa

from memtier.errors import (
    CorruptFileError,
    InvalidArgumentError,
    NotAWalFileError,
    SchemaMismatchError,
    UnknownFormatVersionError,
)

__all__ = [
    "FORMAT_VERSION",
    "DeclaredBlock",
    "HEADER_PREFIX_SIZE",
    "RECORD_HEADER_SIZE",
    "SEAL_RECORD_SIZE",
    "Selection",
    "StreamBlock",
    "StreamContents",
    "WalContents",
    "WalFrame",
    "WalHeader",
    "WalKind",
    "WalSeal",
    "check_schema",
    "declared_blocks",
    "decode_frames_at",
    "decode_seal_record",
    "decode_stream",
    "decode_wal",
    "encode_declaration",
    "encode_frame",
    "encode_header",
    "encode_seal",
    "frame_payload",
    "frame_record",
    "rows_record",
    "selection_record",
    "header_length",
]

FORMAT_VERSION = 3
#: Versions this build reads.
READABLE_VERSIONS = (1, 2, 3)
MAGIC = b"\x89MTWAL\r\n"
RECORD_MAGIC = b"MTWR"
U64_MAX = (1 << 64) - 1

_HEADER_PREFIX = struct.Struct("<8sHHIII")
_HEADER_FIXED = struct.Struct("<16sQq")
_LENGTH = struct.Struct("<I")
_RECORD = struct.Struct("<4sIB3xIIIQQ16sQ")
_SEAL = struct.Struct("<QQq")
_SELECTION = struct.Struct("<QII")
_POSITIONS = 0xFFFFFFFF  # a selection's "first row" when positions follow
RECORD_HEADER_SIZE = _RECORD.size
SEAL_RECORD_SIZE = RECORD_HEADER_SIZE + _SEAL.size
_NO_PRODUCER = bytes(16)


class RecordKind(enum.IntEnum):
    FRAME = 1
    SEAL = 2
    BLOCK = 3
    ROWS = 4
    SELECTION = 5


#: Record kinds by their number (a lookup per record read, not the enum's own).
_RECORD_KINDS = {kind.value: kind for kind in RecordKind}


class WalKind(enum.IntEnum):
    """What a WAL file holds."""

    BLOCK = 0  # one block's frames, then its seal
    STREAM = 1  # frames of many blocks, each named by its record header


@dataclass(frozen=True)
class WalHeader:
    """What a WAL holds: one block of one file group, and the schema of its batches."""

    table: str
    partition: str
    file_group: str
    block_id: int
    schema: pa.Schema
    created_ms: int
    #: Random per file; seeds every record CRC, so records of another WAL never verify.
    file_id: bytes = field(default_factory=lambda: uuid.uuid4().bytes)
    kind: WalKind = WalKind.BLOCK

    def __post_init__(self) -> None:
        _check_u64("block_id", self.block_id)
        if len(self.file_id) != 16:
            raise InvalidArgumentError(f"file_id must be 16 bytes, got {len(self.file_id)}")
        if not self.file_group:
            raise InvalidArgumentError("file_group must not be empty")
        for name, dtype in _walk_types(self.schema):
            if pa.types.is_dictionary(dtype):
                raise InvalidArgumentError(
                    f"column {name!r} is dictionary-encoded; WAL frames carry no dictionaries,"
                    " cast it to its value type"
                )

    @functools.cached_property
    def crc_seed(self) -> int:
        """The seed of every record CRC of this WAL."""
        return crc32c.crc32c(self.file_id)


@dataclass(frozen=True)
class WalFrame:
    """One acknowledged write: a record batch and the ids that make it idempotent."""

    offset: int  # byte offset of the record in the WAL
    length: int  # record bytes, header included
    txn_id: int
    producer_id: bytes
    producer_seq: int
    batch: pa.RecordBatch


@dataclass(frozen=True)
class Selection:
    """The rows of a write's batch one block's frame holds: ``count`` rows from ``start``,
    or the rows at ``positions`` (ascending, 32-bit) when given."""

    count: int
    start: int = 0
    positions: np.ndarray | None = field(default=None, compare=False)

    @classmethod
    def of(cls, positions: np.ndarray) -> Selection:
        """The rows at ``positions`` (ascending): a run when they are consecutive."""
        if len(positions) and positions[-1] - positions[0] + 1 == len(positions):
            return cls(len(positions), int(positions[0]))
        if positions.dtype.itemsize != 4:
            raise InvalidArgumentError(f"selection positions are 32-bit, not {positions.dtype}")
        return cls(len(positions), positions=positions)

    def payload(self, back: int) -> bytes:
        """The selection record's payload, ``back`` bytes after the rows record's start."""
        if self.positions is None:
            return _SELECTION.pack(back, self.count, self.start)
        body = self.positions.tobytes()
        return _SELECTION.pack(back, self.count, _POSITIONS) + body + bytes(_pad8(len(body)))

    def indices(self) -> np.ndarray:
        """The positions of its rows."""
        if self.positions is None:
            return np.arange(self.start, self.start + self.count, dtype=np.int64)
        return self.positions.astype(np.int64)

    def rows_of(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """These rows of ``batch``."""
        if self.positions is None:
            return batch.slice(self.start, self.count)
        return batch.take(pa.array(self.positions))


def _parse_selection(
    payload: pa.Buffer, rows: int, path: str, offset: int, *, check_positions: bool = True
) -> tuple[int, Selection]:
    """(bytes back to the rows record, the selection) of a selection record's payload,
    checked against the ``rows`` of the batch it selects from (positions: unless
    ``check_positions`` is False, the caller checking them)."""
    if payload.size < _SELECTION.size:
        raise CorruptFileError(path, offset, f"selection of {payload.size} bytes")
    back, count, start = _SELECTION.unpack_from(payload, 0)
    if start != _POSITIONS:
        if start + count > rows:
            raise CorruptFileError(path, offset, f"selection of rows {start}..{start + count} of {rows}")
        return back, Selection(count, start)
    if payload.size < _SELECTION.size + 4 * count:
        raise CorruptFileError(path, offset, f"selection of {count} positions in {payload.size} bytes")
    positions = np.frombuffer(payload, np.uint32, count, _SELECTION.size)
    if check_positions and not _ascending_below(positions, rows, [0]):
        raise CorruptFileError(path, offset, f"selection positions not ascending below {rows}")
    return back, Selection(count, positions=positions)


def _ascending_below(positions: np.ndarray, rows: int, starts: list[int]) -> bool:
    """Whether each run of ``positions`` from each of ``starts`` on is ascending and
    below ``rows``."""
    if not len(positions):
        return True
    steps = np.diff(positions.astype(np.int64))
    steps[[s - 1 for s in starts if s]] = 1  # (where a run starts any step is fine)
    return int(positions.max()) < rows and bool((steps > 0).all())


@dataclass(frozen=True)
class WalSeal:
    """The closing record of a block: nothing is appended after it."""

    frame_count: int
    row_count: int
    sealed_ms: int


@dataclass(frozen=True)
class WalContents:
    """Every valid record of one WAL, decoded (batches reference the bytes read)."""

    path: str
    header: WalHeader
    frames: tuple[WalFrame, ...]
    seal: WalSeal | None
    #: End of the last valid record: the WAL's true length.
    size: int
    #: Bytes after ``size`` holding no valid record (a torn or still running append).
    tail: int

    @property
    def sealed(self) -> bool:
        return self.seal is not None

    @property
    def row_count(self) -> int:
        return sum(frame.batch.num_rows for frame in self.frames)

    def to_table(self) -> pa.Table:
        """All frames' rows as one table (zero-copy: chunks are the frames' batches)."""
        return pa.Table.from_batches([f.batch for f in self.frames], schema=self.header.schema)


# -- encoding -----------------------------------------------------------------------------


def _check_u64(name: str, value: int) -> None:
    if not 0 <= value <= U64_MAX:
        raise InvalidArgumentError(f"{name} must be an unsigned 64-bit integer, got {value}")


def _walk_types(schema: pa.Schema) -> Iterator[tuple[str, pa.DataType]]:
    stack: list[tuple[str, pa.DataType]] = [(f.name, f.type) for f in schema]
    while stack:
        name, dtype = stack.pop()
        yield name, dtype
        stack.extend(
            (f"{name}.{dtype.field(i).name}", dtype.field(i).type) for i in range(dtype.num_fields)
        )


def _pad8(length: int) -> int:
    return -length % 8


def _header_body(header: WalHeader) -> bytes:
    """The header body (also the payload of a stream's block record), padded to 8 bytes."""
    parts = [_HEADER_FIXED.pack(header.file_id, header.block_id, header.created_ms)]
    texts = (header.table, header.partition, header.file_group)
    for blob in (*(t.encode() for t in texts), header.schema.serialize().to_pybytes()):
        parts += [_LENGTH.pack(len(blob)), blob]
    body = b"".join(parts)
    return body + bytes(_pad8(len(body)))


def encode_header(header: WalHeader) -> bytes:
    """The header bytes a new WAL starts with."""
    body = _header_body(header)
    prefix = _HEADER_PREFIX.pack(MAGIC, FORMAT_VERSION, header.kind, len(body), 0, 0)
    crc = crc32c.crc32c(body, crc32c.crc32c(prefix[8:20]))
    return _HEADER_PREFIX.pack(MAGIC, FORMAT_VERSION, header.kind, len(body), 0, crc) + body


def _record_header(
    kind: RecordKind,
    payload: Any,
    sync_mark: int,
    txn_id: int,
    producer_id: bytes,
    producer_seq: int,
    seed: int,
    block_ref: int = 0,
) -> bytearray:
    record = bytearray(RECORD_HEADER_SIZE)
    _RECORD.pack_into(
        record,
        0,
        RECORD_MAGIC,
        0,
        kind,
        len(payload),
        crc32c.crc32c(payload),
        block_ref,
        sync_mark,
        txn_id,
        producer_id,
        producer_seq,
    )
    _LENGTH.pack_into(record, 4, crc32c.crc32c(memoryview(record)[8:], seed))
    return record


def frame_payload(schema: pa.Schema, batch: pa.RecordBatch) -> pa.Buffer:
    """A frame's payload: ``batch`` (checked against ``schema``) as an Arrow IPC message.

    The payload lives only until it is written, so it comes from mimalloc, which keeps
    freed pages for the next one: a table server's jemalloc hands freed pages back at once
    (:mod:`memtier.tableserver.memory`), and faulting each payload's pages in anew took
    0.3-0.45 ms of a 10,000-row write's server CPU (bench/RESULTS.md)."""
    if not batch.schema.equals(schema):
        check_schema(schema, batch.schema, "the appended batch")
    payload = batch.serialize(memory_pool=pa.mimalloc_memory_pool())
    if payload.size % 8:  # Arrow pads IPC messages to 8 bytes; keep records aligned if not
        payload = pa.py_buffer(payload.to_pybytes() + bytes(_pad8(payload.size)))
    return payload


def _checked_record_header(
    kind: RecordKind, seed: int, payload: Any, *, txn_id: int, producer_id: bytes, producer_seq: int,
    sync_mark: int, block_ref: int,
) -> bytearray:
    """The record header of a write's record (frame, rows or selection), its ids checked."""
    if not (0 <= txn_id <= U64_MAX and 0 <= producer_seq <= U64_MAX):
        _check_u64("txn_id", txn_id)
        _check_u64("producer_seq", producer_seq)
    if len(producer_id) != 16:
        raise InvalidArgumentError(f"producer_id must be 16 bytes, got {len(producer_id)}")
    return _record_header(kind, payload, sync_mark, txn_id, bytes(producer_id), producer_seq, seed, block_ref)


def frame_record(
    seed: int,
    payload: pa.Buffer,
    *,
    txn_id: int,
    producer_id: bytes,
    producer_seq: int,
    sync_mark: int,
    block_ref: int = 0,
) -> bytearray:
    """The record header of a frame carrying ``payload`` (see :func:`frame_payload`)."""
    return _checked_record_header(RecordKind.FRAME, seed, payload, txn_id=txn_id, producer_id=producer_id,
                                  producer_seq=producer_seq, sync_mark=sync_mark, block_ref=block_ref)


def rows_record(seed: int, payload: pa.Buffer, *, txn_id: int, producer_id: bytes, producer_seq: int,
                sync_mark: int) -> bytearray:
    """The record header of a write's rows (``payload``: :func:`frame_payload` of its
    whole batch), which the selection records after it take rows of."""
    return _checked_record_header(RecordKind.ROWS, seed, payload, txn_id=txn_id, producer_id=producer_id,
                                  producer_seq=producer_seq, sync_mark=sync_mark, block_ref=0)


def selection_record(
    seed: int, payload: bytes, *, txn_id: int, producer_id: bytes, producer_seq: int, sync_mark: int,
    block_ref: int,
) -> bytes:
    """A block's frame taking rows of the rows record before it (``payload``:
    :meth:`Selection.payload`), header and payload."""
    return bytes(_checked_record_header(
        RecordKind.SELECTION, seed, payload, txn_id=txn_id, producer_id=producer_id, producer_seq=producer_seq,
        sync_mark=sync_mark, block_ref=block_ref,
    )) + payload


def encode_frame(
    header: WalHeader,
    batch: pa.RecordBatch,
    *,
    txn_id: int,
    producer_id: bytes,
    producer_seq: int,
    sync_mark: int,
) -> tuple[bytearray, pa.Buffer]:
    """A frame record of a block file as (record header, payload)."""
    payload = frame_payload(header.schema, batch)
    record = frame_record(
        header.crc_seed,
        payload,
        txn_id=txn_id,
        producer_id=producer_id,
        producer_seq=producer_seq,
        sync_mark=sync_mark,
    )
    return record, payload


def encode_declaration(stream: WalHeader, block: WalHeader, ref: int, *, sync_mark: int) -> bytes:
    """The record declaring ``block`` in a stream segment as reference ``ref``."""
    payload = _header_body(block)
    record = _record_header(
        RecordKind.BLOCK, payload, sync_mark, 0, _NO_PRODUCER, 0, stream.crc_seed, ref
    )
    return bytes(record) + payload


def encode_seal(header: WalHeader, seal: WalSeal, *, sync_mark: int) -> bytes:
    """The seal record closing a block."""
    payload = _SEAL.pack(seal.frame_count, seal.row_count, seal.sealed_ms)
    record = _record_header(
        RecordKind.SEAL, payload, sync_mark, 0, _NO_PRODUCER, 0, header.crc_seed
    )
    return bytes(record + payload)


def check_schema(
    expected: pa.Schema,
    actual: pa.Schema,
    what: str,
    expected_name: str = "the WAL schema",
) -> None:
    """Raise :class:`SchemaMismatchError` naming the columns where ``actual`` differs."""
    if actual.equals(expected):
        return
    want = {f.name: f for f in expected}
    have = {f.name: f for f in actual}
    problems = [f"missing {n!r}" for n in want if n not in have]
    problems += [f"unexpected {n!r}" for n in have if n not in want]
    problems += [
        f"{n!r} is {have[n].type}{'' if have[n].nullable else ' not null'}, expected "
        f"{want[n].type}{'' if want[n].nullable else ' not null'}"
        for n in want
        if n in have and not have[n].equals(want[n])
    ]
    if not problems and list(want) != list(have):
        problems = [f"columns are in order {list(have)}, expected {list(want)}"]
    raise SchemaMismatchError(f"{what} does not match {expected_name}: {'; '.join(problems)}")


# -- decoding -----------------------------------------------------------------------------


#: Bytes :func:`header_length` needs to see.
HEADER_PREFIX_SIZE = _HEADER_PREFIX.size


def header_length(prefix: bytes | pa.Buffer, path: str) -> int:
    """The header's length, from the first :data:`HEADER_PREFIX_SIZE` bytes of a WAL."""
    data = memoryview(prefix).cast("B")
    if len(data) < _HEADER_PREFIX.size or data[:8] != MAGIC:
        raise NotAWalFileError(path, 0, "not a memtier WAL file (no WAL magic)")
    _, version, _, body_length, _, _ = _HEADER_PREFIX.unpack_from(data, 0)
    if version not in READABLE_VERSIONS:
        raise UnknownFormatVersionError(
            f"{path}: WAL format version {version} is not supported (this build reads "
            f"versions {', '.join(map(str, READABLE_VERSIONS))})"
        )
    return _HEADER_PREFIX.size + int(body_length)


def decode_header(data: pa.Buffer, path: str) -> tuple[WalHeader, int]:
    """The header and the offset of the first record."""
    end = header_length(data, path)
    _, _, kind, _, _, crc = _HEADER_PREFIX.unpack_from(data, 0)
    if end > data.size:
        raise CorruptFileError(path, 12, f"header of {end} bytes is longer than the file")
    view = memoryview(data).cast("B")
    if crc32c.crc32c(view[_HEADER_PREFIX.size : end], crc32c.crc32c(view[8:20])) != crc:
        raise CorruptFileError(path, 0, "header checksum mismatch")
    if kind not in tuple(WalKind):
        raise CorruptFileError(path, 10, f"unknown WAL file kind {kind}")
    header = _parse_header_body(data.slice(_HEADER_PREFIX.size, end - _HEADER_PREFIX.size),
                                path, _HEADER_PREFIX.size, WalKind(kind))
    return header, end


def _parse_header_body(body: pa.Buffer, path: str, offset: int, kind: WalKind) -> WalHeader:
    try:
        file_id, block_id, created_ms = _HEADER_FIXED.unpack_from(body, 0)
        pos = _HEADER_FIXED.size
        blobs = []
        for _ in range(4):
            (length,) = _LENGTH.unpack_from(body, pos)
            blobs.append(body.slice(pos + 4, length))
            pos += 4 + length
        if pos > body.size:
            raise ValueError("fields run past the header")
        schema = pa.ipc.read_schema(blobs[3])
        table, partition, file_group = (blob.to_pybytes().decode() for blob in blobs[:3])
        return WalHeader(table, partition, file_group, block_id, schema, created_ms, file_id, kind)
    except (ValueError, struct.error, pa.ArrowException, InvalidArgumentError) as e:
        raise CorruptFileError(path, offset, f"unreadable header: {e}") from e


class _Record(NamedTuple):
    """A record header as read (a tuple: one is made per record a read or recovery walks)."""

    kind: RecordKind
    payload_length: int
    sync_mark: int
    txn_id: int
    producer_id: bytes
    producer_seq: int
    block_ref: int
    payload_crc: int
    #: False when only the payload is damaged: the record header itself is intact.
    payload_ok: bool = True


def _parse_record(
    data: pa.Buffer, view: memoryview, offset: int, seed: int, *, repair: bool = False,
    check_payload: bool = True,
) -> _Record | str:
    """The record at ``offset`` (its header intact; with ``repair``, a header with one
    flipped bit is repaired), or why there is none; ``check_payload=False`` leaves the
    payload unchecked (reported intact)."""
    end = offset + RECORD_HEADER_SIZE
    if end > data.size:
        return "incomplete record header"
    header: Any = view[offset:end]
    if header[:4] != RECORD_MAGIC or crc32c.crc32c(header[8:], seed) != _LENGTH.unpack_from(header, 4)[0]:
        header = _repaired_header(header, seed) if repair else None
        if header is None:
            return "no record magic" if view[offset : offset + 4] != RECORD_MAGIC else (
                "record header checksum mismatch"
            )
    (
        _,
        _,
        kind,
        payload_length,
        payload_crc,
        block_ref,
        sync_mark,
        txn_id,
        producer_id,
        seq,
    ) = _RECORD.unpack_from(header, 0)
    record_kind = _RECORD_KINDS.get(kind)
    if record_kind is None:
        return f"unknown record kind {kind}"
    if end + payload_length > data.size:
        return f"incomplete record: {payload_length} payload bytes announced"
    payload_ok = not check_payload or crc32c.crc32c(view[end : end + payload_length]) == payload_crc
    return _Record(
        record_kind, payload_length, sync_mark, txn_id, producer_id, seq, block_ref,
        payload_crc, payload_ok,
    )


@functools.cache
def _bit_syndromes(length: int) -> dict[int, int]:
    """For a message of ``length`` bytes: the CRC32C change each single flipped bit makes
    -> that bit's index. CRC32C is linear, so the change does not depend on the message
    or the seed, and no two bits (nor a bit and a CRC bit) of a message this short give
    the same change."""
    zero = crc32c.crc32c(bytes(length))
    syndromes = {}
    message = bytearray(length)
    for bit in range(8 * length):
        message[bit >> 3] = 1 << (bit & 7)
        syndromes[crc32c.crc32c(message) ^ zero] = bit
        message[bit >> 3] = 0
    return syndromes


def _repair_bit(message: bytearray, crc: int, seed: int) -> bool:
    """Flip the one bit of ``message`` that makes its CRC32C (seeded) equal ``crc``, if
    one does; whether the message now matches ``crc`` (True also when the bit that flipped
    was in ``crc`` itself)."""
    syndrome = crc32c.crc32c(message, seed) ^ crc
    if syndrome == 0 or syndrome.bit_count() == 1:
        return True
    bit = _bit_syndromes(len(message)).get(syndrome)
    if bit is None:
        return False
    message[bit >> 3] ^= 1 << (bit & 7)
    return True


def _repaired_header(header: memoryview, seed: int) -> bytes | None:
    """A record header with at most one flipped bit (magic, CRC or checked bytes),
    repaired; None if it has more damage (or is no record header)."""
    magic_flips = int.from_bytes(header[:4], "little") ^ int.from_bytes(RECORD_MAGIC, "little")
    if magic_flips.bit_count() > 1:
        return None
    fixed = bytearray(header)
    fixed[:4] = RECORD_MAGIC
    checked = fixed[8:]
    (crc,) = _LENGTH.unpack_from(fixed, 4)
    if magic_flips:  # the one flipped bit was in the magic: the rest must be intact
        return bytes(fixed) if crc32c.crc32c(checked, seed) == crc else None
    if not _repair_bit(checked, crc, seed):
        return None
    fixed[8:] = checked
    return bytes(fixed)


def _durable_witness(data: pa.Buffer, view: memoryview, bad: int, seed: int) -> int | None:
    """The offset of an intact record after ``bad`` written once ``bad`` was durable (so
    ``bad`` is damage, not a torn tail), or None."""
    rest = data.slice(bad + 1).to_pybytes()
    at = rest.find(RECORD_MAGIC)
    while at >= 0:
        record = _parse_record(data, view, bad + 1 + at, seed)
        if isinstance(record, _Record) and record.sync_mark > bad:
            return bad + 1 + at
        at = rest.find(RECORD_MAGIC, at + 1)
    return None


def _check_tail(
    data: pa.Buffer, view: memoryview, bad: int, seed: int, reason: str, path: str
) -> None:
    """Raise if an intact record after ``bad`` was written once ``bad`` was durable."""
    witness = _durable_witness(data, view, bad, seed)
    if witness is not None:
        record = _parse_record(data, view, witness, seed)
        assert isinstance(record, _Record)
        raise CorruptFileError(
            path,
            bad,
            f"{reason}, but the intact record at byte {witness} was written after "
            f"{record.sync_mark} bytes were durable",
        )


def _decode_batch(payload: pa.Buffer, schema: pa.Schema, path: str, offset: int) -> pa.RecordBatch:
    try:
        return pa.ipc.read_record_batch(payload, schema)
    except (pa.ArrowException, ValueError) as e:
        raise CorruptFileError(
            path, offset, f"frame does not decode with the WAL schema: {e}"
        ) from e


#: Record kinds only a stream holds.
_STREAM_ONLY = (RecordKind.BLOCK, RecordKind.ROWS, RecordKind.SELECTION)


def decode_wal(data: pa.Buffer, path: str) -> WalContents:
    """Decode a whole WAL, stopping at a torn tail; :class:`CorruptFileError` on damage."""
    header, pos = decode_header(data, path)
    if header.kind is not WalKind.BLOCK:
        raise NotAWalFileError(path, 10, "a WAL stream, not a block file: read it as a stream")
    seed = header.crc_seed
    view = memoryview(data).cast("B")
    frames: list[WalFrame] = []
    seal: WalSeal | None = None
    rows = 0
    while pos < data.size:
        record = _parse_record(data, view, pos, seed)
        if isinstance(record, _Record) and not record.payload_ok:
            record = "payload checksum mismatch"
        if isinstance(record, str):
            _check_tail(data, view, pos, seed, record, path)
            break
        if seal is not None:
            raise CorruptFileError(path, pos, "record after the seal")
        if record.kind in _STREAM_ONLY:
            raise CorruptFileError(path, pos, f"a {record.kind.name.lower()} record in a block file")
        payload = data.slice(pos + RECORD_HEADER_SIZE, record.payload_length)
        length = RECORD_HEADER_SIZE + record.payload_length
        if record.kind is RecordKind.SEAL:
            seal = _decode_seal_payload(payload, path, pos)
            if (seal.frame_count, seal.row_count) != (len(frames), rows):
                raise CorruptFileError(
                    path,
                    pos,
                    f"seal counts {seal.frame_count} frames / {seal.row_count} rows, "
                    f"the file holds {len(frames)} / {rows}",
                )
        else:
            batch = _decode_batch(payload, header.schema, path, pos)
            rows += batch.num_rows
            frames.append(
                WalFrame(
                    pos,
                    length,
                    record.txn_id,
                    record.producer_id,
                    record.producer_seq,
                    batch,
                )
            )
        pos += length
    return WalContents(path, header, tuple(frames), seal, pos, data.size - pos)


def decode_frames_at(
    data: pa.Buffer, places: list[tuple[int, int]], seed: int, schema: pa.Schema, path: str, *, base: int = 0
) -> list[WalFrame]:
    """The frames at ``places`` (offset, length) of ``data``, bytes of a WAL from its
    offset ``base`` on (a stream segment's records are seeded with ``seed``, its header's
    :attr:`WalHeader.crc_seed`), every byte checked; :class:`CorruptFileError` if no intact
    frame is at one. A frame's offset is its offset in the WAL. A frame that selects rows
    of a write's rows record starts there and ends with its selection record; the frames
    of one write are decoded together (its batch once, its records walked once, all their
    rows taken at once)."""
    view = memoryview(data).cast("B")
    frames: list[WalFrame | None] = [None] * len(places)
    # a rows record's offset -> the record (checked once) and the places selecting rows of it
    writes: dict[int, tuple[_Record, list[int]]] = {}
    for i, (offset, _) in enumerate(places):
        if offset in writes:  # another frame of a write met already
            writes[offset][1].append(i)
            continue
        record = _parse_record(data, view, offset, seed)
        if isinstance(record, _Record) and record.kind is RecordKind.ROWS and record.payload_ok:
            writes[offset] = (record, [i])
        elif isinstance(record, str) or record.kind is not RecordKind.FRAME or not record.payload_ok:
            raise CorruptFileError(path, base + offset, f"no intact frame where one was written: {_why(record)} "
                                   f"({data.size} bytes read from byte {base})")
        else:
            payload = data.slice(offset + RECORD_HEADER_SIZE, record.payload_length)
            frames[i] = WalFrame(
                base + offset, RECORD_HEADER_SIZE + record.payload_length, record.txn_id, record.producer_id,
                record.producer_seq, _decode_batch(payload, schema, path, base + offset),
            )
    for offset, (rows, members) in writes.items():
        ends = [offset + places[i][1] for i in members]
        for i, frame in zip(members, _selected_frames(data, view, offset, rows, ends, seed, schema, path, base),
                            strict=True):
            frames[i] = frame
    assert all(f is not None for f in frames)
    return frames  # type: ignore[return-value]


def _why(record: _Record | str) -> str:
    """Why a record is not an intact frame."""
    if isinstance(record, str):
        return record
    return f"a {record.kind.name.lower()} record" if record.payload_ok else "payload checksum mismatch"


def _selected_frames(
    data: pa.Buffer, view: memoryview, offset: int, rows: _Record, ends: list[int], seed: int,
    schema: pa.Schema, path: str, base: int,
) -> list[WalFrame]:
    """The frames whose selection records end at ``ends``, of the write whose intact
    ``rows`` record is at ``offset``: the records after it walked once by their headers,
    the rows of every frame taken from its batch at once."""
    batch = _decode_batch(data.slice(offset + RECORD_HEADER_SIZE, rows.payload_length), schema, path, base + offset)
    wanted, found, last = set(ends), {}, max(ends)
    pos = offset + RECORD_HEADER_SIZE + rows.payload_length
    while pos < last:
        record = _parse_record(data, view, pos, seed)
        if isinstance(record, str):
            break
        length = RECORD_HEADER_SIZE + record.payload_length
        if pos + length in wanted and record.kind is RecordKind.SELECTION and record.payload_ok:
            back, selection = _parse_selection(
                data.slice(pos + RECORD_HEADER_SIZE, record.payload_length), batch.num_rows, path, base + pos,
                check_positions=False,
            )
            if back != pos - offset:
                raise CorruptFileError(path, base + pos, f"a selection of rows {back} bytes back, not {pos - offset}")
            found[pos + length] = (record, selection)
        pos += length
    missing = [end for end in ends if end not in found]
    if missing:
        raise CorruptFileError(path, base + offset, f"no intact selection ending at byte {base + missing[0]}")
    chosen = [found[end] for end in ends]
    indices = np.concatenate([s.indices() for _, s in chosen])
    starts = np.cumsum([0, *(s.count for _, s in chosen)]).tolist()[:-1]
    if not _ascending_below(indices, batch.num_rows, starts):
        raise CorruptFileError(path, base + offset, f"a selection's positions not ascending below {batch.num_rows}")
    taken = batch.take(pa.array(indices))
    return [
        WalFrame(base + offset, end - offset, r.txn_id, r.producer_id, r.producer_seq, taken.slice(a, s.count))
        for end, (r, s), a in zip(ends, chosen, starts, strict=True)
    ]


def _decode_seal_payload(payload: pa.Buffer, path: str, offset: int) -> WalSeal:
    if payload.size != _SEAL.size:
        raise CorruptFileError(path, offset, f"seal of {payload.size} bytes, expected {_SEAL.size}")
    return WalSeal(*_SEAL.unpack_from(payload, 0))


def decode_seal_record(record: bytes, header_seed: int) -> WalSeal | None:
    """The seal if ``record`` (the last :data:`SEAL_RECORD_SIZE` bytes of a WAL) is one."""
    data = pa.py_buffer(record)
    parsed = _parse_record(data, memoryview(data).cast("B"), 0, header_seed)
    if (
        isinstance(parsed, str)
        or parsed.kind is not RecordKind.SEAL
        or data.size != SEAL_RECORD_SIZE
    ):
        return None
    return WalSeal(*_SEAL.unpack_from(data, RECORD_HEADER_SIZE))


# -- streams ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamBlock:
    """The frames of one block found in one stream segment, in order."""

    header: WalHeader
    frames: tuple[WalFrame, ...]
    #: Why the block cannot be recovered from this segment (a damaged frame), or None.
    error: CorruptFileError | None = None


@dataclass(frozen=True)
class StreamContents:
    """Every valid record of one stream segment, by block (in order of declaration)."""

    path: str
    header: WalHeader
    blocks: tuple[StreamBlock, ...]
    size: int  # end of the last valid record
    tail: int  # bytes after ``size`` holding no valid record (torn, or still being written)
    #: Damage that lost frames of a block it cannot name (its declaration was lost), or None.
    error: CorruptFileError | None = None


def decode_stream(data: pa.Buffer, path: str) -> StreamContents:
    """Decode a stream segment, stopping at a torn tail.

    Each block is recovered on its own: a durable frame whose payload is damaged fails
    only its block (its :attr:`StreamBlock.error`); the other blocks are exact. A record
    header, or a block record's payload, with one flipped bit is repaired. A durable
    record header damaged beyond repair names no block: decoding goes on at the next
    intact record, and every block declared before the damage fails (the lost record may
    have been one of its frames); a block whose declaration was lost is known by no name,
    so the segment fails (:attr:`StreamContents.error`)."""
    header, pos = decode_header(data, path)
    if header.kind is not WalKind.STREAM:
        raise NotAWalFileError(path, 10, "a block file, not a WAL stream")
    seed = header.crc_seed
    view = memoryview(data).cast("B")
    blocks: dict[int, tuple[WalHeader, list[WalFrame]]] = {}
    errors: dict[int, CorruptFileError] = {}
    lost: CorruptFileError | None = None  # a record lost to damage, of some block
    unnamed: CorruptFileError | None = None  # frames of a block whose declaration was lost
    rows: _Rows | None = None  # the last rows record
    while pos < data.size:
        record = _parse_record(data, view, pos, seed, repair=True)
        if isinstance(record, str):
            resume = _next_record(data, view, pos, seed)
            if resume is None:
                break  # a torn tail: never acknowledged
            lost = CorruptFileError(path, pos, f"{record}: a record lost before byte {resume}")
            for ref in blocks:
                errors.setdefault(ref, lost)
            pos = resume
            continue
        length = RECORD_HEADER_SIZE + record.payload_length
        ref = record.block_ref
        if record.kind is RecordKind.SEAL:
            raise CorruptFileError(path, pos, "a seal record in a stream")
        if record.kind is RecordKind.ROWS:
            if not record.payload_ok and _durable_witness(data, view, pos, seed) is None:
                break  # a torn tail: never acknowledged
            rows = _Rows(pos, data.slice(pos + RECORD_HEADER_SIZE, record.payload_length) if record.payload_ok
                         else CorruptFileError(path, pos, "rows payload checksum mismatch"))
            pos += length
            continue
        if record.kind in _FRAMES and ref not in blocks:
            if lost is None:
                raise CorruptFileError(path, pos, f"a frame of block reference {ref}, never declared")
            unnamed = unnamed or CorruptFileError(
                path, pos, f"a frame of block reference {ref}, whose declaration was lost ({lost})"
            )
            pos += length
            continue
        if record.kind is RecordKind.BLOCK and ref in blocks:
            raise CorruptFileError(path, pos, f"block reference {ref} declared twice")
        payload: Any = data.slice(pos + RECORD_HEADER_SIZE, record.payload_length)
        if not record.payload_ok and record.kind is RecordKind.BLOCK:
            payload = _repaired_payload(data, view, pos, record)
        if payload is None or not record.payload_ok and record.kind in _FRAMES:
            if _durable_witness(data, view, pos, seed) is None:
                break  # a torn tail: never acknowledged
            if record.kind is RecordKind.BLOCK:
                unnamed = unnamed or CorruptFileError(path, pos, "damaged block record")
                lost = lost or unnamed
            else:
                errors.setdefault(ref, CorruptFileError(path, pos, "frame payload checksum mismatch"))
            pos += length
            continue
        if record.kind is RecordKind.BLOCK:
            block = _parse_header_body(payload, path, pos + RECORD_HEADER_SIZE, WalKind.BLOCK)
            blocks[ref] = (block, [])
        elif ref not in errors:
            block, frames = blocks[ref]
            try:
                start, batch = (
                    (pos, _decode_batch(payload, block.schema, path, pos)) if record.kind is RecordKind.FRAME
                    else _selected(rows, payload, pos, block.schema, path)
                )
            except CorruptFileError as e:
                errors[ref] = e
            else:
                frames.append(
                    WalFrame(
                        start, pos + length - start, record.txn_id, record.producer_id, record.producer_seq, batch
                    )
                )
        pos += length
    found = tuple(
        StreamBlock(block, tuple(frames), errors.get(ref)) for ref, (block, frames) in blocks.items()
    )
    return StreamContents(path, header, found, pos, data.size - pos, unnamed)


#: Record kinds that are a block's frame.
_FRAMES = (RecordKind.FRAME, RecordKind.SELECTION)


@dataclass
class _Rows:
    """A rows record met decoding a stream: its offset, and its payload (or why it is
    unreadable), decoded once per schema that selections ask for."""

    offset: int
    payload: pa.Buffer | CorruptFileError
    batches: dict[pa.Schema, pa.RecordBatch] = field(default_factory=dict)


def _selected(
    rows: _Rows | None, payload: pa.Buffer, pos: int, schema: pa.Schema, path: str
) -> tuple[int, pa.RecordBatch]:
    """(the rows record's offset, the rows) of the selection record at ``pos``."""
    back = _SELECTION.unpack_from(payload, 0)[0] if payload.size >= _SELECTION.size else -1
    if rows is None or pos - back != rows.offset:
        raise CorruptFileError(path, pos, "a selection of a rows record lost (or never written)")
    if isinstance(rows.payload, CorruptFileError):
        raise rows.payload
    batch = rows.batches.get(schema)
    if batch is None:
        batch = rows.batches[schema] = _decode_batch(rows.payload, schema, path, rows.offset)
    return rows.offset, _parse_selection(payload, batch.num_rows, path, pos)[1].rows_of(batch)


@dataclass(frozen=True)
class DeclaredBlock:
    """A block a stream segment holds frames of, and the highest producer sequence number
    among those frames, per producer id."""

    header: WalHeader
    producer_seqs: dict[bytes, int]


def declared_blocks(data: pa.Buffer, path: str) -> tuple[DeclaredBlock, ...] | None:
    """The blocks a stream segment declares, found by walking its record headers only
    (frame payloads are neither checked nor decoded: on a memory-mapped file their pages
    are not even read); None when a record header or declaration does not verify (damage,
    or a torn tail: :func:`decode_stream` tells which)."""
    header, pos = decode_header(data, path)
    if header.kind is not WalKind.STREAM:
        raise NotAWalFileError(path, 10, "a block file, not a WAL stream")
    view = memoryview(data).cast("B")
    blocks: dict[int, DeclaredBlock] = {}
    while pos < data.size:
        record = _parse_record(data, view, pos, header.crc_seed, check_payload=False)
        if isinstance(record, str) or record.kind is RecordKind.SEAL:
            return None
        if record.kind is RecordKind.ROWS:
            pass  # named by the selections after it
        elif record.kind is RecordKind.BLOCK:
            start = pos + RECORD_HEADER_SIZE
            if crc32c.crc32c(view[start : start + record.payload_length]) != record.payload_crc:
                return None
            body = data.slice(start, record.payload_length)
            blocks[record.block_ref] = DeclaredBlock(_parse_header_body(body, path, start, WalKind.BLOCK), {})
        elif record.block_ref not in blocks:
            return None
        else:
            seqs = blocks[record.block_ref].producer_seqs
            seqs[record.producer_id] = max(seqs.get(record.producer_id, -1), record.producer_seq)
        pos += RECORD_HEADER_SIZE + record.payload_length
    return tuple(blocks.values())


#: Block records (a block file's header) at most this long are repaired from one flipped bit.
_REPAIRABLE_PAYLOAD = 4096


def _repaired_payload(data: pa.Buffer, view: memoryview, pos: int, record: _Record) -> pa.Buffer | None:
    """A short payload with one flipped bit, repaired; None if it cannot be."""
    if record.payload_length > _REPAIRABLE_PAYLOAD:
        return None
    start = pos + RECORD_HEADER_SIZE
    payload = bytearray(view[start : start + record.payload_length])
    return pa.py_buffer(bytes(payload)) if _repair_bit(payload, record.payload_crc, 0) else None


def _next_record(data: pa.Buffer, view: memoryview, bad: int, seed: int) -> int | None:
    """Where decoding goes on after an unreadable record at ``bad``: the next intact
    record, if an intact record after ``bad`` was written once ``bad`` was durable (so
    ``bad`` is damage, not a torn tail); None for a torn tail."""
    if _durable_witness(data, view, bad, seed) is None:
        return None
    at = bad + 8
    while at + RECORD_HEADER_SIZE <= data.size:
        if view[at : at + 4] == RECORD_MAGIC and isinstance(_parse_record(data, view, at, seed), _Record):
            return at
        at += 8  # records are 8-byte aligned
    raise AssertionError("unreachable: the witness is an intact record")
