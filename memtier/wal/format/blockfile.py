"""Decoding a block file whole, and the frames at known places of any WAL (a flush
reading its rows back from a stream segment). No I/O."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from memtier.errors import (
    CorruptFileError,
    NotAWalFileError,
)
from memtier.wal.format.layout import (
    RECORD_HEADER_SIZE,
    RecordKind,
    WalContents,
    WalFrame,
    WalKind,
    WalSeal,
    _ascending_below,
    _parse_selection,
)
from memtier.wal.format.records import (
    _decode_batch,
    _decode_seal_payload,
    _parse_record,
    _Record,
    _why,
    decode_header,
)
from memtier.wal.format.tails import _check_tail

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
            raise CorruptFileError(
                path,
                base + offset,
                f"no intact frame where one was written: {_why(record)} "
                f"({data.size} bytes read from byte {base})",
            )
        else:
            payload = data.slice(offset + RECORD_HEADER_SIZE, record.payload_length)
            frames[i] = WalFrame(
                base + offset,
                RECORD_HEADER_SIZE + record.payload_length,
                record.txn_id,
                record.producer_id,
                record.producer_seq,
                _decode_batch(payload, schema, path, base + offset),
            )
    for offset, (rows, members) in writes.items():
        ends = [offset + places[i][1] for i in members]
        for i, frame in zip(
            members, _selected_frames(data, view, offset, rows, ends, seed, schema, path, base), strict=True
        ):
            frames[i] = frame
    assert all(f is not None for f in frames)
    return frames  # type: ignore[return-value]


def _selected_frames(
    data: pa.Buffer,
    view: memoryview,
    offset: int,
    rows: _Record,
    ends: list[int],
    seed: int,
    schema: pa.Schema,
    path: str,
    base: int,
) -> list[WalFrame]:
    """The frames whose selection records end at ``ends``, of the write whose intact
    ``rows`` record is at ``offset``: the records after it walked once by their headers,
    the rows of every frame taken from its batch at once."""
    batch = _decode_batch(
        data.slice(offset + RECORD_HEADER_SIZE, rows.payload_length), schema, path, base + offset
    )
    wanted, found, last = set(ends), {}, max(ends)
    pos = offset + RECORD_HEADER_SIZE + rows.payload_length
    while pos < last:
        record = _parse_record(data, view, pos, seed)
        if isinstance(record, str):
            break
        length = RECORD_HEADER_SIZE + record.payload_length
        if pos + length in wanted and record.kind is RecordKind.SELECTION and record.payload_ok:
            back, selection = _parse_selection(
                data.slice(pos + RECORD_HEADER_SIZE, record.payload_length),
                batch.num_rows,
                path,
                base + pos,
                check_positions=False,
            )
            if back != pos - offset:
                raise CorruptFileError(
                    path, base + pos, f"a selection of rows {back} bytes back, not {pos - offset}"
                )
            found[pos + length] = (record, selection)
        pos += length
    missing = [end for end in ends if end not in found]
    if missing:
        raise CorruptFileError(path, base + offset, f"no intact selection ending at byte {base + missing[0]}")
    chosen = [found[end] for end in ends]
    indices = np.concatenate([s.indices() for _, s in chosen])
    starts = np.cumsum([0, *(s.count for _, s in chosen)]).tolist()[:-1]
    if not _ascending_below(indices, batch.num_rows, starts):
        raise CorruptFileError(
            path, base + offset, f"a selection's positions not ascending below {batch.num_rows}"
        )
    taken = batch.take(pa.array(indices))
    return [
        WalFrame(
            base + offset, end - offset, r.txn_id, r.producer_id, r.producer_seq, taken.slice(a, s.count)
        )
        for end, (r, s), a in zip(ends, chosen, starts, strict=True)
    ]
