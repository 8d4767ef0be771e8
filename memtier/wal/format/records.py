"""Parsing one piece of a WAL at a time: its header, a record header, a batch or seal
payload, each checked by its CRC32C. No I/O."""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import crc32c
import pyarrow as pa

from memtier.errors import (
    CorruptFileError,
    InvalidArgumentError,
    NotAWalFileError,
    UnknownFormatVersionError,
)
from memtier.wal.format.bitflips import _repaired_header
from memtier.wal.format.layout import (
    _HEADER_FIXED,
    _HEADER_PREFIX,
    _LENGTH,
    _RECORD,
    _RECORD_KINDS,
    _SEAL,
    MAGIC,
    READABLE_VERSIONS,
    RECORD_HEADER_SIZE,
    RECORD_MAGIC,
    SEAL_RECORD_SIZE,
    RecordKind,
    WalHeader,
    WalKind,
    WalSeal,
)


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
    header = _parse_header_body(
        data.slice(_HEADER_PREFIX.size, end - _HEADER_PREFIX.size), path, _HEADER_PREFIX.size, WalKind(kind)
    )
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
    data: pa.Buffer,
    view: memoryview,
    offset: int,
    seed: int,
    *,
    repair: bool = False,
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
            return (
                "no record magic"
                if view[offset : offset + 4] != RECORD_MAGIC
                else ("record header checksum mismatch")
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
        record_kind,
        payload_length,
        sync_mark,
        txn_id,
        producer_id,
        seq,
        block_ref,
        payload_crc,
        payload_ok,
    )


def _decode_batch(payload: pa.Buffer, schema: pa.Schema, path: str, offset: int) -> pa.RecordBatch:
    try:
        return pa.ipc.read_record_batch(payload, schema)
    except (pa.ArrowException, ValueError) as e:
        raise CorruptFileError(path, offset, f"frame does not decode with the WAL schema: {e}") from e


def _why(record: _Record | str) -> str:
    """Why a record is not an intact frame."""
    if isinstance(record, str):
        return record
    return f"a {record.kind.name.lower()} record" if record.payload_ok else "payload checksum mismatch"


def _decode_seal_payload(payload: pa.Buffer, path: str, offset: int) -> WalSeal:
    if payload.size != _SEAL.size:
        raise CorruptFileError(path, offset, f"seal of {payload.size} bytes, expected {_SEAL.size}")
    return WalSeal(*_SEAL.unpack_from(payload, 0))


def decode_seal_record(record: bytes, header_seed: int) -> WalSeal | None:
    """The seal if ``record`` (the last :data:`SEAL_RECORD_SIZE` bytes of a WAL) is one."""
    data = pa.py_buffer(record)
    parsed = _parse_record(data, memoryview(data).cast("B"), 0, header_seed)
    if isinstance(parsed, str) or parsed.kind is not RecordKind.SEAL or data.size != SEAL_RECORD_SIZE:
        return None
    return WalSeal(*_SEAL.unpack_from(data, RECORD_HEADER_SIZE))
