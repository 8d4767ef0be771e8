"""The WAL byte format: round trips, and every kind of damage detected and located."""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtier.errors import (
    CorruptFileError,
    InvalidArgumentError,
    NotAWalFileError,
    SchemaMismatchError,
    UnknownFormatVersionError,
)
from memtier.wal.format import (
    FORMAT_VERSION,
    RECORD_HEADER_SIZE,
    Selection,
    WalContents,
    WalHeader,
    WalKind,
    WalSeal,
    check_schema,
    decode_frames_at,
    decode_header,
    decode_stream,
    decode_wal,
    encode_declaration,
    encode_frame,
    encode_header,
    encode_seal,
    frame_payload,
    rows_record,
    selection_record,
)
from tests.support.wal import SCHEMA, batch_for, header, producer_id

PATH = "mem/fg.0000000000000001.wal"
H = header()


def wal_bytes(
    appends: list[tuple[int, int]], *, seal: bool = False, h: WalHeader | None = None
) -> bytes:
    """A WAL written one acknowledged frame at a time (each frame's sync mark is its offset)."""
    h = h or H
    out = bytearray(encode_header(h))
    rows = 0
    for p, s in appends:
        batch = batch_for(p, s)
        rows += batch.num_rows
        record, payload = encode_frame(
            h, batch, txn_id=s // 4, producer_id=producer_id(p), producer_seq=s, sync_mark=len(out)
        )
        out += record + payload.to_pybytes()
    if seal:
        out += encode_seal(h, WalSeal(len(appends), rows, 123), sync_mark=len(out))
    return bytes(out)


def decode(data: bytes) -> WalContents:
    return decode_wal(pa.py_buffer(data), PATH)


APPENDS = [(1, 0), (2, 0), (1, 1), (3, 0), (2, 1)]


def test_round_trip() -> None:
    contents = decode(wal_bytes(APPENDS, seal=True))
    assert contents.header == H
    assert [(f.producer_id, f.producer_seq, f.txn_id) for f in contents.frames] == [
        (producer_id(p), s, s // 4) for p, s in APPENDS
    ]
    for frame, (p, s) in zip(contents.frames, APPENDS, strict=True):
        assert frame.batch.equals(batch_for(p, s))
        assert frame.offset % 8 == 0  # Arrow can use the bytes in place
    assert contents.sealed and contents.seal == WalSeal(5, contents.row_count, 123)
    assert contents.tail == 0 and contents.size == len(wal_bytes(APPENDS, seal=True))
    assert contents.to_table().num_rows == sum(batch_for(p, s).num_rows for p, s in APPENDS)


def test_header_round_trip_keeps_every_field() -> None:
    schema = pa.schema(
        [
            pa.field("k", pa.string(), nullable=False),
            pa.field(
                "nested", pa.struct([("a", pa.list_(pa.int16())), ("b", pa.timestamp("us", "UTC"))])
            ),
            pa.field("m", pa.map_(pa.string(), pa.float64())),
        ],
        metadata={"origin": "test"},
    )
    h = WalHeader("tåble", "year=2024/month=01", "8ea5c1b4-0", 2**64 - 1, schema, -5)
    decoded, end = decode_header(pa.py_buffer(encode_header(h)), PATH)
    assert decoded == h and decoded.schema.metadata == {b"origin": b"test"}
    assert end % 8 == 0


def test_headers_validate_their_fields() -> None:
    with pytest.raises(InvalidArgumentError, match="block_id"):
        header(block_id=-1)
    with pytest.raises(InvalidArgumentError, match="file_group"):
        header(file_group="")
    dictionary = pa.schema([("d", pa.list_(pa.dictionary(pa.int8(), pa.string())))])
    with pytest.raises(InvalidArgumentError, match=r"'d\.item' is dictionary-encoded"):
        header(schema=dictionary)


def test_frames_validate_their_ids() -> None:
    h, batch = header(), batch_for(1, 1)
    with pytest.raises(InvalidArgumentError, match="txn_id"):
        encode_frame(
            h, batch, txn_id=2**64, producer_id=producer_id(1), producer_seq=0, sync_mark=0
        )
    with pytest.raises(InvalidArgumentError, match="producer_seq"):
        encode_frame(h, batch, txn_id=0, producer_id=producer_id(1), producer_seq=-1, sync_mark=0)
    with pytest.raises(InvalidArgumentError, match="producer_id must be 16 bytes"):
        encode_frame(h, batch, txn_id=0, producer_id=b"short", producer_seq=0, sync_mark=0)


def test_schema_mismatch_names_the_columns() -> None:
    other = (
        batch_for(1, 1, rows=8).drop_columns(["row"]).append_column("extra", pa.array([1.0] * 8))
    )
    with pytest.raises(SchemaMismatchError, match=r"missing 'row'; unexpected 'extra'"):
        encode_frame(
            header(), other, txn_id=0, producer_id=producer_id(1), producer_seq=0, sync_mark=0
        )
    retyped = SCHEMA.set(0, pa.field("producer", pa.int32()))
    with pytest.raises(SchemaMismatchError, match="'producer' is int32, expected int64"):
        check_schema(SCHEMA, retyped, "the batch")
    reordered = pa.schema([SCHEMA.field(i) for i in (1, 0, 2, 3)])
    with pytest.raises(SchemaMismatchError, match="columns are in order"):
        check_schema(SCHEMA, reordered, "the batch")


@pytest.mark.parametrize(
    "data", [b"", b"PAR1" + bytes(100), b"\x89MTWAL\r", b"just some text that is not a WAL file"]
)
def test_not_a_wal(data: bytes) -> None:
    with pytest.raises(
        NotAWalFileError, match=f"{PATH}: corrupt at byte 0: not a memtier WAL file"
    ):
        decode(data)


def test_unknown_version() -> None:
    data = bytearray(wal_bytes(APPENDS))
    struct.pack_into("<H", data, 8, FORMAT_VERSION + 1)
    with pytest.raises(
        UnknownFormatVersionError, match=f"{PATH}: WAL format version {FORMAT_VERSION + 1} is not supported"
    ):
        decode(bytes(data))


def test_truncated_header() -> None:
    data = wal_bytes([])
    for cut in (24, len(data) - 1):
        with pytest.raises(CorruptFileError, match=r"header of \d+ bytes is longer than the file"):
            decode(data[:cut])


def frame_bounds(data: bytes) -> list[tuple[int, int]]:
    contents = decode(data)
    bounds = [(f.offset, f.offset + f.length) for f in contents.frames]
    if contents.seal is not None:
        bounds.append(
            (bounds[-1][1] if bounds else decode_header(pa.py_buffer(data), PATH)[1], len(data))
        )
    return bounds


def test_every_damage_is_located() -> None:
    """Flip each byte of a WAL: header damage is refused, damage to any record but the last
    names that record's offset, and a damaged last record is a torn tail."""
    data = wal_bytes(APPENDS)
    bounds = frame_bounds(data)
    header_end = bounds[0][0]
    for at in range(len(data)):
        damaged = bytearray(data)
        damaged[at] ^= 0x5A
        if at < header_end:
            with pytest.raises((CorruptFileError, UnknownFormatVersionError)):
                decode(bytes(damaged))
            continue
        index = next(i for i, (lo, hi) in enumerate(bounds) if lo <= at < hi)
        if index == len(bounds) - 1:
            contents = decode(bytes(damaged))
            assert len(contents.frames) == len(APPENDS) - 1
            assert (contents.size, contents.tail) == (bounds[-1][0], len(data) - bounds[-1][0])
        else:
            with pytest.raises(CorruptFileError) as error:
                decode(bytes(damaged))
            assert error.value.offset == bounds[index][0], at
            assert error.value.path == PATH


def test_every_truncation_of_the_last_record_is_a_torn_tail() -> None:
    for seal in (False, True):
        data = wal_bytes(APPENDS, seal=seal)
        last = frame_bounds(data)[-1][0]
        for cut in range(last, len(data)):
            contents = decode(data[:cut])
            assert len(contents.frames) == len(APPENDS) - (not seal)
            assert contents.seal is None
            assert (contents.size, contents.tail) == (last, cut - last)


def test_unsynced_tail_with_an_intact_later_frame_is_still_a_tail() -> None:
    """Two frames written in one group (neither synced): after a power loss the first may be
    lost while the second reached the disk. Its sync mark proves the first was never
    durable, so both are a torn tail, not corruption."""
    h = header()
    data = bytearray(encode_header(h))
    synced = len(data)
    for s in range(2):
        record, payload = encode_frame(
            h,
            batch_for(1, s),
            txn_id=0,
            producer_id=producer_id(1),
            producer_seq=s,
            sync_mark=synced,
        )
        data += record + payload.to_pybytes()
    data[synced + RECORD_HEADER_SIZE + 3] ^= 0xFF  # damage the first of the two
    contents = decode(bytes(data))
    assert contents.frames == () and contents.size == synced and contents.tail == len(data) - synced


def test_seal_must_match_the_frames() -> None:
    h = H
    data = wal_bytes(APPENDS[:2])
    bad = data + encode_seal(h, WalSeal(3, 1, 0), sync_mark=len(data))
    with pytest.raises(CorruptFileError, match="seal counts 3 frames"):
        decode(bad)


def test_nothing_may_follow_the_seal() -> None:
    h = H
    data = bytearray(wal_bytes(APPENDS[:1], seal=True))
    record, payload = encode_frame(
        h,
        batch_for(9, 9),
        txn_id=0,
        producer_id=producer_id(9),
        producer_seq=9,
        sync_mark=len(data),
    )
    sealed_end = len(data)
    data += record + payload.to_pybytes()
    with pytest.raises(CorruptFileError, match="record after the seal") as error:
        decode(bytes(data))
    assert error.value.offset == sealed_end


def test_records_of_another_wal_never_verify() -> None:
    """Every record CRC is seeded with the file id: a record copied in from another WAL is
    damage, not a frame."""
    mine, theirs = header(), header()
    data = bytearray(wal_bytes(APPENDS[:1], h=mine))
    record, payload = encode_frame(
        theirs,
        batch_for(5, 5),
        txn_id=0,
        producer_id=producer_id(5),
        producer_seq=5,
        sync_mark=len(data),
    )
    data += record + payload.to_pybytes()
    contents = decode(bytes(data))
    assert len(contents.frames) == 1 and contents.tail > 0


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**64 - 1)), max_size=6),
    st.integers(0, 2**64 - 1),
)
def test_ids_round_trip(appends: list[tuple[int, int]], txn: int) -> None:
    h = header()
    data = bytearray(encode_header(h))
    for p, s in appends:
        record, payload = encode_frame(
            h,
            batch_for(p, 1),
            txn_id=txn,
            producer_id=producer_id(p),
            producer_seq=s,
            sync_mark=len(data),
        )
        data += record + payload.to_pybytes()
    frames = decode(bytes(data)).frames
    assert [(f.producer_id, f.producer_seq, f.txn_id) for f in frames] == [
        (producer_id(p), s, txn) for p, s in appends
    ]


# == selections of a write's rows (format version 3) ========================================


STREAM = dataclasses.replace(header("writer"), schema=pa.schema([]), kind=WalKind.STREAM)


def shared_write(selections: list[Selection], batch: pa.RecordBatch) -> bytes:
    """A stream segment declaring a block per selection, then one write: the batch's rows
    record and each block's selection of it."""
    seed, ids = STREAM.crc_seed, {"txn_id": 3, "producer_id": producer_id(1), "producer_seq": 9, "sync_mark": 0}
    out = bytearray(encode_header(STREAM))
    for ref in range(1, len(selections) + 1):
        out += encode_declaration(STREAM, header(f"fg{ref}"), ref, sync_mark=0)
    start = len(out)
    payload = frame_payload(SCHEMA, batch)
    out += rows_record(seed, payload, **ids) + payload.to_pybytes()
    for ref, selection in enumerate(selections, 1):
        out += selection_record(seed, selection.payload(len(out) - start), **ids, block_ref=ref)
    return bytes(out)


def test_selections_of_a_write_s_rows_round_trip() -> None:
    batch = batch_for(1, 9, rows=10)
    selections = [Selection(4, 3), Selection.of(np.array([0, 2, 9], np.int32)), Selection.of(np.arange(10, dtype=np.int32))]
    contents = decode_stream(pa.py_buffer(shared_write(selections, batch)), PATH)
    assert [[f.batch for f in b.frames] for b in contents.blocks] == [
        [batch.slice(3, 4)], [batch.take([0, 2, 9])], [batch]
    ]
    assert all(b.error is None for b in contents.blocks) and contents.tail == 0
    assert len({(f.offset, f.txn_id, f.producer_seq) for b in contents.blocks for f in b.frames}) == 1
    assert all(len(s.payload(8)) % 8 == 0 for s in selections)  # records stay 8-byte aligned
    assert Selection.of(np.array([5, 6, 7], np.int32)) == Selection(3, 5)  # consecutive: a run
    with pytest.raises(InvalidArgumentError, match="32-bit"):
        Selection.of(np.array([1, 3], np.int64))


@pytest.mark.parametrize(("positions", "problem"), [
    ([0, 2, 10], "not ascending below 10"), ([3, 3, 4], "not ascending"), ([5, 1, 2], "not ascending"),
])
def test_a_selection_outside_its_rows_is_damage_of_its_block(positions: list[int], problem: str) -> None:
    """Rows a selection cannot hold fail its block (its checksum made to match: a writer's bug)."""
    batch = batch_for(1, 9, rows=10)
    data = shared_write([Selection(2, 0), Selection(3, positions=np.array(positions, np.uint32))], batch)
    contents = decode_stream(pa.py_buffer(data), PATH)
    ok, bad = contents.blocks
    assert ok.error is None and [f.batch for f in ok.frames] == [batch.slice(0, 2)]
    assert bad.error is not None and problem in str(bad.error) and not bad.frames
    places = [(f.offset, f.length) for f in ok.frames]  # read back by where they lie: the same
    places.append((places[0][0], len(data) - places[0][0]))
    with pytest.raises(CorruptFileError, match=problem):
        decode_frames_at(pa.py_buffer(data), places, STREAM.crc_seed, SCHEMA, PATH)
    assert [f.batch for f in decode_frames_at(pa.py_buffer(data), places[:1], STREAM.crc_seed, SCHEMA, PATH)] == [
        batch.slice(0, 2)
    ]


def test_rows_and_selections_are_stream_records_only() -> None:
    batch = batch_for(1, 0)
    payload = frame_payload(SCHEMA, batch)
    data = bytearray(encode_header(H))
    data += rows_record(H.crc_seed, payload, txn_id=0, producer_id=producer_id(1), producer_seq=0,
                        sync_mark=len(data)) + payload.to_pybytes()
    with pytest.raises(CorruptFileError, match="a rows record in a block file"):
        decode(bytes(data))
