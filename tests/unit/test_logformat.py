"""Hudi log blocks: the samples' log files, byte layout, our blocks, corruption."""

from __future__ import annotations

import dataclasses
import datetime
import io
import json
import struct
from pathlib import Path

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from memtier.errors import (
    CorruptFileError,
    InvalidArgumentError,
    SchemaMismatchError,
    UnknownFormatVersionError,
    UnsupportedTableError,
)
from memtier.hudi.avro import arrow_to_avro_schema, avro_long, with_meta_fields
from memtier.hudi.logformat import (
    MAGIC,
    BlockType,
    HeaderKey,
    LogBlock,
    avro_data_block,
    delete_block,
    iter_blocks,
    parquet_data_block,
    read_data_block,
    read_delete_block,
    rollback_block,
)
from tests.support.samples import SAMPLES, Sample, unpack

LOG_BLOCKS = {"v6_trips_8i1u": BlockType.AVRO_DATA}  # every other sample log: PARQUET_DATA
INSTANT = "20250101000000000"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _log_files(table_dir: Path) -> list[Path]:
    logs = table_dir.rglob(".*.log.*")
    return sorted(p for p in logs if ".hoodie" not in p.relative_to(table_dir).parts)


def _blocks(data: bytes | pa.Buffer, path: str = "f.log") -> list[LogBlock]:
    return list(iter_blocks(memoryview(data), path))


MOR_SAMPLES = [s for s in SAMPLES if s.table_type == "MERGE_ON_READ"]


@pytest.mark.parametrize("sample", MOR_SAMPLES, ids=lambda s: s.id)
def test_every_sample_data_log_parses(sample: Sample, tmp_path: Path) -> None:
    table_dir = unpack(sample, tmp_path)
    for log in _log_files(table_dir):
        blocks = _blocks(log.read_bytes(), str(log))
        assert blocks, log
        assert sum(b.size for b in blocks) == log.stat().st_size
        for block in blocks:
            assert block.block_type == LOG_BLOCKS.get(sample.name, BlockType.PARQUET_DATA)
            assert block.instant_time and len(block.instant_time) == 17
            records = read_data_block(block)
            assert records.num_rows > 0
            assert records.column_names[:5] == [f["name"] for f in block.schema["fields"][:5]]
            assert set(records.column("_hoodie_commit_time").to_pylist()) == {block.instant_time}


def test_the_annotated_avro_log_bytes(tmp_path: Path) -> None:
    """hudi-format.md section 6, offset by offset."""
    table_dir = unpack(SAMPLES[0], tmp_path)
    (log,) = _log_files(table_dir)
    data = log.read_bytes()
    assert len(data) == 1148
    (block,) = _blocks(data)
    assert (block.offset, block.size, block.block_type) == (0, 1148, BlockType.AVRO_DATA)
    assert data[0:6] == MAGIC
    assert struct.unpack_from(">qiii", data, 6) == (1134, 1, 3, 2)
    assert struct.unpack_from(">ii", data, 26) == (0, 17)
    assert block.instant_time == "20250331030645735" == data[34:51].decode()
    assert struct.unpack_from(">ii", data, 51) == (2, 829)
    assert block.header[HeaderKey.SCHEMA] == data[59:888].decode()
    assert struct.unpack_from(">qiii", data, 888) == (240, 3, 1, 228)
    assert bytes(block.content) == data[896:1136]
    assert struct.unpack_from(">iq", data, 1136) == (0, 1140)
    (row,) = read_data_block(block).to_pylist()
    assert (row["rider"], row["fare"], row["_hoodie_file_name"]) == (
        "rider-D",
        25.0,
        "d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0",
    )
    parsed = fastavro.parse_schema(block.schema)
    assert fastavro.schemaless_reader(io.BytesIO(data[908:1136]), parsed, None) == row


def test_our_avro_block_is_the_spark_written_block_byte_for_byte(tmp_path: Path) -> None:
    (log,) = _log_files(unpack(SAMPLES[0], tmp_path))
    data = log.read_bytes()
    (block,) = _blocks(data)
    ours = avro_data_block(read_data_block(block), block.schema, block.instant_time)
    assert isinstance(ours, pa.Buffer)
    assert ours.to_pybytes() == data


def _records(n: int) -> tuple[pa.Table, dict]:
    data = pa.table(
        {
            "key": pa.array(np.arange(n), pa.int64()),
            "name": pa.array([f"name-{i}" if i % 5 else None for i in range(n)], pa.string()),
            "price": pa.array(np.linspace(0, 1, n), pa.float64()),
        }
    )
    schema = with_meta_fields(arrow_to_avro_schema(data.schema, "t"))
    meta = {
        "_hoodie_commit_time": [INSTANT] * n,
        "_hoodie_commit_seqno": [f"{INSTANT}_0_{i}" for i in range(n)],
        "_hoodie_record_key": [str(i) for i in range(n)],
        "_hoodie_partition_path": ["p=1"] * n,
        "_hoodie_file_name": ["00000001-aaaa-bbbb-cccc-dddddddddddd-0"] * n,
    }
    columns = {k: pa.array(v, pa.string()) for k, v in meta.items()}
    table = pa.table({**columns, **{c: data.column(c) for c in data.column_names}})
    return table, schema


@pytest.mark.parametrize("n", [0, 1, 100, 70_000])
def test_avro_block_round_trip(n: int) -> None:
    records, schema = _records(n)
    (block,) = _blocks(avro_data_block(records, schema, INSTANT))
    assert block.block_type == BlockType.AVRO_DATA
    assert block.instant_time == INSTANT and block.schema == schema
    assert struct.unpack_from(">ii", block.content, 0) == (3, n)
    assert read_data_block(block).equals(records)
    narrow = pa.schema([("name", pa.large_string()), ("absent", pa.int8())])
    assert read_data_block(block, narrow).to_pydict() == {
        "name": records.column("name").to_pylist(),
        "absent": [None] * n,
    }


def test_parquet_block_round_trip() -> None:
    records, schema = _records(50)
    records = records.set_column(5, "key", records.column("key").cast(pa.int32()))
    (block,) = _blocks(parquet_data_block(records, schema, INSTANT))
    assert block.block_type == BlockType.PARQUET_DATA and block.schema == schema
    assert bytes(block.content[:4]) == bytes(block.content[-4:]) == b"PAR1"
    back = read_data_block(block)
    assert back.schema.field("key").type == pa.int64()  # the Avro schema's type
    assert back.to_pydict() == records.to_pydict()
    with pytest.raises(SchemaMismatchError, match="'price'"):
        parquet_data_block(records.set_column(7, "price", pa.array(["x"] * 50)), schema, INSTANT)


@pytest.mark.parametrize(
    "ordering_type",
    [pa.int64(), pa.int32(), pa.int8(), pa.float32(), pa.float64(), pa.string(), pa.date32(),
     pa.timestamp("ns", "UTC"), pa.decimal128(10, 2), None],
)
def test_a_delete_in_commit_order_carries_hudis_integer_zero(ordering_type: pa.DataType | None) -> None:
    """Whatever the ordering field's type, as Apache Hudi writes it: union branch 2 (Java
    1.0's IntWrapper, the plain union's long), value 0; no ordering field: null (branch 0)."""
    _, schema = _records(1)
    keys = pa.array(["1", "2", "été"])
    paths = pa.array(["p=1", "p=1", None])
    (block,) = _blocks(delete_block(keys, paths, INSTANT, schema, ordering_type))
    assert block.block_type == BlockType.DELETE and block.schema == schema
    version, length = struct.unpack_from(">ii", block.content, 0)
    assert version == 3 and length == len(block.content) - 8
    datum = bytes(block.content[8:])
    # items: count 3 (zigzag 6), then recordKey branch 1, length, bytes, ...
    assert datum[:4] == b"\x06\x02\x021"
    assert datum[4:9] == b"\x02\x06p=1"
    zero = b"\x00" if ordering_type is None else b"\x04\x00"
    assert datum[9:9 + len(zero)] == zero
    deletes = read_delete_block(block)
    assert deletes.column("record_key").to_pylist() == ["1", "2", "été"]
    assert deletes.column("partition_path").to_pylist() == ["p=1", "p=1", None]
    assert deletes.column("ordering_val").to_pylist() == [None if ordering_type is None else 0] * 3


def test_delete_block_without_keys_and_bad_arguments() -> None:
    _, schema = _records(1)
    nothing = pa.array([], pa.string())
    (block,) = _blocks(delete_block(nothing, nothing, INSTANT, schema, pa.int64()))
    assert bytes(block.content) == struct.pack(">ii", 3, 1) + b"\x00"
    assert read_delete_block(block).num_rows == 0
    with pytest.raises(SchemaMismatchError):
        delete_block(pa.array(["a"]), pa.array([]), INSTANT, schema, None)
    with pytest.raises(SchemaMismatchError, match="bool"):
        delete_block(pa.array(["a"]), pa.array(["p"]), INSTANT, schema, pa.bool_())
    with pytest.raises(InvalidArgumentError):
        read_delete_block(block.__class__(BlockType.COMMAND, {}, memoryview(b""), 0, 0))


def test_rollback_block() -> None:
    data = rollback_block("20250102000000000", INSTANT)
    (block,) = _blocks(data)
    assert block.block_type == BlockType.COMMAND and len(block.content) == 0
    assert block.instant_time == "20250102000000000"
    assert block.target_instant_time == INSTANT
    assert block.header[HeaderKey.COMMAND_BLOCK_TYPE] == "0"
    assert struct.unpack_from(">q", data, len(data) - 8)[0] == len(data) - 8
    with pytest.raises(InvalidArgumentError):
        read_data_block(block)


def _log() -> tuple[bytes, list[LogBlock]]:
    records, schema = _records(20)
    parts = [
        avro_data_block(records, schema, INSTANT).to_pybytes(),
        delete_block(pa.array(["1"]), pa.array(["p=1"]), INSTANT, schema, pa.int64()),
        rollback_block("20250102000000000", INSTANT),
    ]
    data = b"".join(parts)
    return data, _blocks(data)


def test_truncation_at_every_offset_keeps_whole_blocks_and_marks_the_rest_corrupt() -> None:
    data, blocks = _log()
    ends = [b.offset + b.size for b in blocks]
    for cut in range(1, len(data)):
        found = _blocks(data[:cut])
        whole = [b for b in blocks if b.offset + b.size <= cut]
        assert [(b.block_type, b.offset, b.size) for b in found[: len(whole)]] == [
            (b.block_type, b.offset, b.size) for b in whole
        ]
        rest = found[len(whole) :]
        if cut not in ends:
            assert [(b.block_type, b.offset, b.offset + b.size) for b in rest] == [
                (BlockType.CORRUPT, max([0, *[e for e in ends if e <= cut]]), cut)
            ]


@pytest.mark.parametrize("block_index", [0, 1, 2])
def test_garbled_framing_yields_corrupt_then_resyncs(block_index: int) -> None:
    data, blocks = _log()
    target = blocks[block_index]
    rng = np.random.default_rng(block_index)
    head = range(target.offset, target.offset + 14)  # magic and block length
    tail = range(target.offset + target.size - 8, target.offset + target.size)  # total size
    for at in [*head, *tail]:
        garbled = bytearray(data)
        garbled[at] ^= int(rng.integers(1, 256))
        found = _blocks(bytes(garbled))
        # A block must be followed by a magic, so a bad magic spoils the block before too.
        in_magic = at < target.offset + 6 and block_index > 0
        spoiled = {block_index, block_index - 1} if in_magic else {block_index}
        intact = [(b.block_type, b.offset) for b in found if b.block_type != BlockType.CORRUPT]
        expected = [(b.block_type, b.offset) for i, b in enumerate(blocks) if i not in spoiled]
        assert intact == expected, at
        corrupt = [b for b in found if b.block_type == BlockType.CORRUPT]
        assert corrupt and corrupt[0].offset == blocks[min(spoiled)].offset, at
        assert sum(b.size for b in found) == len(data)


def test_garbage_in_the_log_is_skipped_to_the_next_magic() -> None:
    data, blocks = _log()
    size0, cut = blocks[0].size, blocks[1].offset
    found = _blocks(b"junk#HUD" + data)
    assert [(b.block_type, b.offset, b.size) for b in found] == [
        (BlockType.CORRUPT, 0, 8),
        *[(b.block_type, b.offset + 8, b.size) for b in blocks],
    ]
    assert bytes(found[0].content) == b"junk#HUD"
    # Between blocks: no magic follows block 0 any more, which spoils it (as in Hudi).
    found = _blocks(data[:cut] + b"junk#HUD" + data[cut:])
    assert [(b.block_type, b.offset, b.size) for b in found] == [
        (BlockType.CORRUPT, 0, size0 + 8),
        (BlockType.DELETE, cut + 8, blocks[1].size),
        (BlockType.COMMAND, blocks[2].offset + 8, blocks[2].size),
    ]


def test_garbled_insides_of_a_well_framed_block_are_corrupt() -> None:
    data, blocks = _log()
    garbled = bytearray(data)
    struct.pack_into(">i", garbled, blocks[2].offset + 22, 1000)  # header entry count
    found = _blocks(bytes(garbled))
    kinds = [b.block_type for b in found]
    assert kinds == [BlockType.AVRO_DATA, BlockType.DELETE, BlockType.CORRUPT]


def test_unknown_log_format_version_names_file_and_offset() -> None:
    data, blocks = _log()
    newer = bytearray(data)
    struct.pack_into(">i", newer, blocks[1].offset + 14, 2)
    message = f"x.log.*byte {blocks[1].offset}.*version 2"
    with pytest.raises(UnknownFormatVersionError, match=message):
        _blocks(bytes(newer), "x.log")


def test_unknown_content_version_is_refused() -> None:
    records, schema = _records(3)
    data = bytearray(avro_data_block(records, schema, INSTANT).to_pybytes())
    (block,) = _blocks(bytes(data))
    at = len(data) - 12 - len(block.content)
    struct.pack_into(">i", data, at, 9)
    (block,) = _blocks(bytes(data), "y.log")
    with pytest.raises(UnknownFormatVersionError, match="y.log.*content version 9"):
        read_data_block(block)


def test_partial_update_blocks_are_refused() -> None:
    records, schema = _records(2)
    (block,) = _blocks(avro_data_block(records, schema, INSTANT).to_pybytes())
    partial = dataclasses.replace(block, header={**block.header, HeaderKey.IS_PARTIAL: "true"})
    with pytest.raises(UnsupportedTableError, match="partial-update block"):
        read_data_block(partial)


def test_schema_header_is_compact_json() -> None:
    records, schema = _records(1)
    (block,) = _blocks(avro_data_block(records, schema, INSTANT))
    assert block.header[HeaderKey.SCHEMA] == json.dumps(schema, separators=(",", ":"))


@pytest.mark.parametrize(
    ("ordering", "expected", "branch"),
    [
        (pa.array([7, None, -3], pa.int64()), [7, 0, -3], 3),
        (pa.array([7, None, 2], pa.int32()), [7, 0, 2], 2),
        (pa.array([1.5, None, 2.0], pa.float64()), [1.5, None, 2.0], 5),
        (pa.array(["b", None, "a"]), ["b", None, "a"], 7),
        (pa.array([datetime.date(2024, 1, 2), None, datetime.date(1999, 1, 1)]),
         [datetime.date(2024, 1, 2), None, datetime.date(1999, 1, 1)], 2),
        (pa.array([1_000_000, None, 5], pa.timestamp("us", "UTC")),
         [_EPOCH + datetime.timedelta(seconds=1), None, _EPOCH + datetime.timedelta(microseconds=5)], 3),
        (pa.array([None, None, None], pa.int64()), [0, 0, 0], 2),
    ],
    ids=str,
)
def test_delete_block_carries_each_deletes_ordering_value(ordering: pa.Array, expected: list, branch: int) -> None:
    """Deletes keep their ordering value (readers keep a record with a greater one) in
    Hudi 1.0's union of wrapper records, as Hudi's Spark writer writes the field's value
    (dates as IntWrapper days, timestamps as LongWrapper micros); a delete without one is
    in commit order (IntWrapper 0)."""
    _, schema = _records(1)
    keys = pa.array(["1", "2", "3"])
    paths = pa.array(["p=1"] * 3)
    (block,) = _blocks(delete_block(keys, paths, INSTANT, schema, ordering.type, ordering))
    first = bytes(block.content[8 + 9 :])  # count, then recordKey "1" and partitionPath "p=1"
    assert first[:1] == bytes([branch * 2])
    deletes = read_delete_block(block, ordering.type)
    assert deletes.column("record_key").to_pylist() == ["1", "2", "3"]
    assert deletes.column("ordering_val").to_pylist() == expected
    with pytest.raises(SchemaMismatchError, match="ordering values"):
        delete_block(keys, paths, INSTANT, schema, ordering.type, ordering.slice(1))


def _delete_list(orderings: list[bytes]) -> LogBlock:
    """A DELETE block of keys "0", "1", ... without partition paths, whose orderingVal
    bytes are given."""
    items = b"".join(b"\x02" + avro_long(len(str(i))) + str(i).encode() + b"\x00" + o for i, o in enumerate(orderings))
    datum = avro_long(len(orderings)) + items + b"\x00"
    content = struct.pack(">ii", 3, len(datum)) + datum
    return LogBlock(BlockType.DELETE, {}, memoryview(content), 0, 0)


_ZERO = avro_long(2) + avro_long(0)


@pytest.mark.parametrize(
    ("ordering_type", "orderings", "expected"),
    [
        # as memtier wrote them before: the plain union (int, long, float, ...)
        (pa.int64(), [avro_long(2) + avro_long(7), _ZERO], [7, 0]),
        (pa.int32(), [avro_long(1) + avro_long(7), _ZERO], [7, 0]),
        (pa.float64(), [avro_long(4) + struct.pack("<d", 1.5), _ZERO], [1.5, None]),
        (pa.string(), [avro_long(6) + avro_long(1) + b"b", _ZERO], ["b", None]),
        (pa.timestamp("us"), [avro_long(12) + avro_long(10**6), _ZERO], [_EPOCH + datetime.timedelta(seconds=1), None]),
        # as Hudi 1.0.2's Spark writer writes them: LongWrapper 15 (its bytes), and its
        # Spark values of dates and timestamps wrapped
        (pa.int64(), [b"\x06\x1e", _ZERO], [15, 0]),
        (pa.timestamp("us", "UTC"), [avro_long(3) + avro_long(10**6), _ZERO],
         [_EPOCH + datetime.timedelta(seconds=1), None]),
        (pa.date32(), [avro_long(2) + avro_long(366), _ZERO], [datetime.date(1971, 1, 2), None]),
    ],
    ids=str,
)
def test_delete_blocks_of_either_layout_are_read(ordering_type: pa.DataType, orderings: list[bytes], expected: list) -> None:
    deletes = read_delete_block(_delete_list(orderings), ordering_type)
    assert deletes.column("record_key").to_pylist() == ["0", "1"]
    got = deletes.column("ordering_val").to_pylist()
    assert [v.replace(tzinfo=None) if isinstance(v, datetime.datetime) else v for v in got] == [
        v.replace(tzinfo=None) if isinstance(v, datetime.datetime) else v for v in expected]


def test_a_delete_block_that_does_not_decode_is_corrupt() -> None:
    good = _delete_list([avro_long(3) + avro_long(7)])
    for content in (bytes(good.content)[:-3], bytes(good.content) + b"\x00",
                    bytes(good.content).replace(avro_long(3) + avro_long(7), avro_long(40) + avro_long(7))):
        content = content[:4] + struct.pack(">i", len(content) - 8) + content[8:]
        with pytest.raises(CorruptFileError, match="do not decode"):
            read_delete_block(LogBlock(BlockType.DELETE, {}, memoryview(content), 0, 0), pa.int64())
