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

import crc32c
import numpy as np
import pyarrow as pa

from memtier.errors import (
    CorruptFileError,
    InvalidArgumentError,
    SchemaMismatchError,
)

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


def _check_u64(name: str, value: int) -> None:
    if not 0 <= value <= U64_MAX:
        raise InvalidArgumentError(f"{name} must be an unsigned 64-bit integer, got {value}")


def _walk_types(schema: pa.Schema) -> Iterator[tuple[str, pa.DataType]]:
    stack: list[tuple[str, pa.DataType]] = [(f.name, f.type) for f in schema]
    while stack:
        name, dtype = stack.pop()
        yield name, dtype
        stack.extend((f"{name}.{dtype.field(i).name}", dtype.field(i).type) for i in range(dtype.num_fields))


def _pad8(length: int) -> int:
    return -length % 8


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


#: Bytes :func:`header_length` needs to see.
HEADER_PREFIX_SIZE = _HEADER_PREFIX.size
