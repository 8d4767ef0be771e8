"""Telling a torn tail (unacknowledged, cut off) from damage (a later intact record
says the bytes were durable), finding the next intact record past damage, and repairing
a short payload with one flipped bit. No I/O."""

from __future__ import annotations

import pyarrow as pa

from memtier.errors import (
    CorruptFileError,
)
from memtier.wal.format.bitflips import _repair_bit
from memtier.wal.format.layout import RECORD_HEADER_SIZE, RECORD_MAGIC
from memtier.wal.format.records import _parse_record, _Record


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


def _check_tail(data: pa.Buffer, view: memoryview, bad: int, seed: int, reason: str, path: str) -> None:
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
