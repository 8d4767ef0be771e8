"""Decoding a stream segment: every block's frames, each block failed on its own where
damage may have taken one of its frames. No I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import crc32c
import pyarrow as pa

from memtier.errors import (
    CorruptFileError,
    NotAWalFileError,
)
from memtier.wal.format.layout import (
    _SELECTION,
    RECORD_HEADER_SIZE,
    RecordKind,
    WalFrame,
    WalHeader,
    WalKind,
    _parse_selection,
)
from memtier.wal.format.records import _decode_batch, _parse_header_body, _parse_record, decode_header
from memtier.wal.format.tails import _durable_witness, _next_record, _repaired_payload


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
            rows = _Rows(
                pos,
                data.slice(pos + RECORD_HEADER_SIZE, record.payload_length)
                if record.payload_ok
                else CorruptFileError(path, pos, "rows payload checksum mismatch"),
            )
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
                    (pos, _decode_batch(payload, block.schema, path, pos))
                    if record.kind is RecordKind.FRAME
                    else _selected(rows, payload, pos, block.schema, path)
                )
            except CorruptFileError as e:
                errors[ref] = e
            else:
                frames.append(
                    WalFrame(
                        start,
                        pos + length - start,
                        record.txn_id,
                        record.producer_id,
                        record.producer_seq,
                        batch,
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
