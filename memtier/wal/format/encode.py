"""Encoding a WAL: its header, frame, rows, selection, block and seal records (the
bytes :mod:`memtier.wal.format.layout` describes). No I/O."""

from __future__ import annotations

from typing import Any

import crc32c
import pyarrow as pa

from memtier.errors import (
    InvalidArgumentError,
)
from memtier.wal.format.layout import (
    _HEADER_FIXED,
    _HEADER_PREFIX,
    _LENGTH,
    _NO_PRODUCER,
    _RECORD,
    _SEAL,
    FORMAT_VERSION,
    MAGIC,
    RECORD_HEADER_SIZE,
    RECORD_MAGIC,
    U64_MAX,
    RecordKind,
    WalHeader,
    WalSeal,
    _check_u64,
    _pad8,
    check_schema,
)


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
    kind: RecordKind,
    seed: int,
    payload: Any,
    *,
    txn_id: int,
    producer_id: bytes,
    producer_seq: int,
    sync_mark: int,
    block_ref: int,
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
    return _checked_record_header(
        RecordKind.FRAME,
        seed,
        payload,
        txn_id=txn_id,
        producer_id=producer_id,
        producer_seq=producer_seq,
        sync_mark=sync_mark,
        block_ref=block_ref,
    )


def rows_record(
    seed: int, payload: pa.Buffer, *, txn_id: int, producer_id: bytes, producer_seq: int, sync_mark: int
) -> bytearray:
    """The record header of a write's rows (``payload``: :func:`frame_payload` of its
    whole batch), which the selection records after it take rows of."""
    return _checked_record_header(
        RecordKind.ROWS,
        seed,
        payload,
        txn_id=txn_id,
        producer_id=producer_id,
        producer_seq=producer_seq,
        sync_mark=sync_mark,
        block_ref=0,
    )


def selection_record(
    seed: int,
    payload: bytes,
    *,
    txn_id: int,
    producer_id: bytes,
    producer_seq: int,
    sync_mark: int,
    block_ref: int,
) -> bytes:
    """A block's frame taking rows of the rows record before it (``payload``:
    :meth:`Selection.payload`), header and payload."""
    return (
        bytes(
            _checked_record_header(
                RecordKind.SELECTION,
                seed,
                payload,
                txn_id=txn_id,
                producer_id=producer_id,
                producer_seq=producer_seq,
                sync_mark=sync_mark,
                block_ref=block_ref,
            )
        )
        + payload
    )


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
    record = _record_header(RecordKind.BLOCK, payload, sync_mark, 0, _NO_PRODUCER, 0, stream.crc_seed, ref)
    return bytes(record) + payload


def encode_seal(header: WalHeader, seal: WalSeal, *, sync_mark: int) -> bytes:
    """The seal record closing a block."""
    payload = _SEAL.pack(seal.frame_count, seal.row_count, seal.sealed_ms)
    record = _record_header(RecordKind.SEAL, payload, sync_mark, 0, _NO_PRODUCER, 0, header.crc_seed)
    return bytes(record + payload)
