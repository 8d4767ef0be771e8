"""Arrow <-> Avro: schemas as Spark + Hudi write them, and the vectorized datum codec."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import struct
from pathlib import Path

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from memtier.errors import CorruptFileError, InvalidArgumentError, SchemaMismatchError
from memtier.hudi.avro import (
    META_FIELDS,
    arrow_to_avro_schema,
    avro_to_arrow_schema,
    decode_framed,
    decode_records,
    encode_framed,
    encode_records,
    with_meta_fields,
)
from tests.support.samples import SAMPLES, Sample, unpack

WITH_COMMITS = [s for s in SAMPLES if s.rows and s.version == 6]


def _commit_schemas(table_dir: Path) -> list[dict]:
    schemas = []
    for instant in sorted((table_dir / ".hoodie").glob("*.*commit")):
        schema = json.loads(instant.read_text()).get("extraMetadata", {}).get("schema")
        if schema:
            schemas.append(json.loads(schema))
    return schemas


def _create_schema(table_dir: Path) -> dict:
    for line in (table_dir / ".hoodie" / "hoodie.properties").read_text().splitlines():
        if line.startswith("hoodie.table.create.schema="):
            return json.loads(line.split("=", 1)[1].replace("\\:", ":").replace("\\=", "="))
    raise AssertionError(f"{table_dir} has no create schema")


def _fastavro_rows(data: pa.Buffer, offsets: np.ndarray, schema: dict) -> list[dict]:
    parsed = fastavro.parse_schema(schema)
    raw = data.to_pybytes()
    return [
        fastavro.schemaless_reader(io.BytesIO(raw[a:b]), parsed, None)
        for a, b in zip(offsets[:-1], offsets[1:], strict=True)
    ]


# --- schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize("sample", WITH_COMMITS, ids=lambda s: s.id)
def test_spark_written_schemas_round_trip_exactly(sample: Sample, tmp_path: Path) -> None:
    table_dir = unpack(sample, tmp_path)
    schemas = _commit_schemas(table_dir)
    assert schemas, "every sample with rows has a commit schema"
    for schema in schemas:
        table_name = schema["name"].removesuffix("_record")
        assert arrow_to_avro_schema(avro_to_arrow_schema(schema), table_name) == schema


@pytest.mark.parametrize("sample", WITH_COMMITS, ids=lambda s: s.id)
def test_spark_create_schema_with_value_first_unions_is_read(
    sample: Sample, tmp_path: Path
) -> None:
    table_dir = unpack(sample, tmp_path)
    create = _create_schema(table_dir)
    assert any(f["type"][-1] == "null" for f in create["fields"])  # Spark's ["T", "null"]
    commit = avro_to_arrow_schema(_commit_schemas(table_dir)[0])
    for field in avro_to_arrow_schema(create):
        assert field.type == commit.field(field.name).type


def test_sample_table_types_map_to_arrow_as_hudi_rs_reads_them(tmp_path: Path) -> None:
    sample = next(s for s in SAMPLES if s.zip_path.endswith("mor/parquet/v6_nonpartitioned.zip"))
    schema = avro_to_arrow_schema(_commit_schemas(unpack(sample, tmp_path))[0])
    assert schema.field("id").type == pa.int32()
    assert schema.field("longField").type == pa.int64()
    assert schema.field("floatField").type == pa.float32()
    assert schema.field("decimalField").type == pa.decimal128(10, 5)
    assert schema.field("dateField").type == pa.date32()
    assert schema.field("timestampField").type == pa.timestamp("us", "UTC")
    assert schema.field("binaryField").type == pa.binary()
    assert schema.field("arrayField").type.value_type == pa.struct(
        [("arr_struct_f1", pa.string()), ("arr_struct_f2", pa.int32())]
    )
    assert schema.field("mapField").type.key_type == pa.string()


def test_with_meta_fields_matches_the_schema_header_spark_writes(tmp_path: Path) -> None:
    sample = SAMPLES[0]
    assert sample.name == "v6_trips_8i1u"
    table_dir = unpack(sample, tmp_path)
    (log,) = [p for p in table_dir.rglob(".*.log.*") if ".hoodie" not in p.parts]
    data = log.read_bytes()
    header_schema = data[51 + 8 : 51 + 8 + 829].decode()  # hudi-format.md section 6
    commit = _commit_schemas(table_dir)[-1]
    assert json.dumps(with_meta_fields(commit), separators=(",", ":")) == header_schema
    assert with_meta_fields(with_meta_fields(commit)) == with_meta_fields(commit)
    assert [f["name"] for f in with_meta_fields(commit)["fields"][:5]] == list(META_FIELDS)


def test_arrow_to_avro_names_like_spark() -> None:
    schema = pa.schema(
        [
            ("d", pa.decimal128(38, 2)),
            ("s", pa.struct([("inner", pa.struct([("x", pa.decimal128(5, 1))]))])),
            ("l", pa.list_(pa.int8())),
            ("m", pa.map_(pa.string(), pa.large_string())),
            ("t", pa.timestamp("ns")),
        ]
    )
    avro = arrow_to_avro_schema(schema, "tbl")
    fields = {f["name"]: f for f in avro["fields"]}
    assert avro["name"] == "tbl_record" and avro["namespace"] == "hoodie.tbl"
    assert all(f["type"][0] == "null" and f["default"] is None for f in avro["fields"])
    assert fields["d"]["type"][1] == {
        "type": "fixed",
        "name": "fixed",
        "namespace": "hoodie.tbl.tbl_record.d",
        "size": 16,
        "logicalType": "decimal",
        "precision": 38,
        "scale": 2,
    }
    inner = fields["s"]["type"][1]["fields"][0]["type"][1]
    assert (inner["name"], inner["namespace"]) == ("inner", "hoodie.tbl.tbl_record.s")
    assert inner["fields"][0]["type"][1]["namespace"] == "hoodie.tbl.tbl_record.s.inner.x"
    assert fields["l"]["type"][1] == {"type": "array", "items": ["null", "int"]}
    assert fields["m"]["type"][1] == {"type": "map", "values": ["null", "string"]}
    assert fields["t"]["type"][1] == {"type": "long", "logicalType": "timestamp-micros"}


@pytest.mark.parametrize(
    ("arrow_type", "path"),
    [
        (pa.uint32(), "c"),
        (pa.float16(), "c"),
        (pa.time32("ms"), "c"),
        (pa.map_(pa.int32(), pa.string()), "c"),
        (pa.struct([("bad", pa.duration("s"))]), "c.bad"),
    ],
)
def test_unsupported_arrow_types_name_the_column(arrow_type: pa.DataType, path: str) -> None:
    with pytest.raises(SchemaMismatchError, match=f"column '{path}'"):
        arrow_to_avro_schema(pa.schema([("c", arrow_type)]), "t")


def test_avro_to_arrow_reads_named_references_and_plain_types() -> None:
    schema = {
        "type": "record",
        "name": "r",
        "namespace": "ns",
        "fields": [
            {"name": "a", "type": {"type": "fixed", "name": "f16", "size": 16}},
            {"name": "b", "type": ["f16", "null"]},
            {"name": "c", "type": {"type": "enum", "name": "e", "symbols": ["X"]}},
            {"name": "d", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
            {"name": "e", "type": "int"},
        ],
    }
    arrow = avro_to_arrow_schema(json.dumps(schema))
    expected = [pa.binary(16), pa.binary(16), pa.string(), pa.timestamp("ms"), pa.int32()]
    assert arrow.types == expected
    assert [f.nullable for f in arrow] == [False, True, False, False, False]
    with pytest.raises(SchemaMismatchError, match="'u'"):
        avro_to_arrow_schema({**schema, "fields": [{"name": "u", "type": ["int", "string"]}]})


# --- datums ----------------------------------------------------------------------------

ALL_TYPES = pa.schema(
    [
        ("b", pa.bool_()),
        ("i8", pa.int8()),
        ("i32", pa.int32()),
        ("i64", pa.int64()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("s", pa.string()),
        ("ls", pa.large_string()),
        ("bin", pa.binary()),
        ("dec", pa.decimal128(10, 5)),
        ("wide", pa.decimal128(38, 3)),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", "UTC")),
        ("st", pa.struct([("x", pa.int32()), ("y", pa.string())])),
        ("l", pa.list_(pa.float64())),
        ("m", pa.map_(pa.string(), pa.int64())),
    ]
)

ROWS = [
    {
        "b": True,
        "i8": -128,
        "i32": 2**31 - 1,
        "i64": -(2**63),
        "f32": 1.5,
        "f64": -0.0,
        "s": "héllo wörld, a string longer than twelve bytes",
        "ls": "",
        "bin": b"\x00\xff",
        "dec": decimal.Decimal("-12345.67890"),
        "wide": decimal.Decimal("12345678901234567890123456789012345.678"),
        "d": dt.date(1969, 12, 31),
        "ts": dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC),
        "st": {"x": 1, "y": None},
        "l": [1.0, None, 2.5],
        "m": [("k", 7), ("n", None)],
    },
    dict.fromkeys(ALL_TYPES.names),
    {
        "b": False,
        "i8": 5,
        "i32": -1,
        "i64": 2**63 - 1,
        "f32": float("inf"),
        "f64": 1e300,
        "s": "x",
        "ls": "long" * 10,
        "bin": b"",
        "dec": decimal.Decimal("0.00001"),
        "wide": decimal.Decimal("-1.000"),
        "d": dt.date(2262, 1, 1),
        "ts": dt.datetime(1900, 1, 1, tzinfo=dt.UTC),
        "st": None,
        "l": [],
        "m": [],
    },
]


def _all_types() -> pa.Table:
    return pa.Table.from_pylist(ROWS, schema=ALL_TYPES)


def test_every_type_matches_fastavro_and_round_trips() -> None:
    table = _all_types()
    schema = arrow_to_avro_schema(table.schema, "t")
    data, offsets = encode_records(table, schema)
    assert offsets.dtype == np.int64 and len(offsets) == 4 and offsets[-1] == len(data)
    decoded = _fastavro_rows(data, offsets, schema)
    assert decoded[0]["m"] == {"k": 7, "n": None}
    assert decoded[0]["dec"] == decimal.Decimal("-12345.67890")
    assert decoded[1] == dict.fromkeys(ALL_TYPES.names)
    assert decoded[2]["i64"] == 2**63 - 1 and decoded[2]["ts"] == ROWS[2]["ts"]
    back = decode_records(data, offsets, schema, table.schema)
    assert back.equals(table)


def test_decoding_fastavro_written_records() -> None:
    table = _all_types()
    schema = arrow_to_avro_schema(table.schema, "t")
    parsed = fastavro.parse_schema(schema)
    out, ends = io.BytesIO(), [0]
    for row in table.to_pylist():
        row["m"] = None if row["m"] is None else dict(row["m"])
        fastavro.schemaless_writer(out, parsed, row)
        ends.append(out.tell())
    back = decode_records(out.getvalue(), np.array(ends), schema, table.schema)
    assert back.equals(table)
    ours, _ = encode_records(table, schema)
    assert ours.to_pybytes() == out.getvalue()


def test_spark_union_order_and_plain_fields_are_encoded() -> None:
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "a", "type": ["long", "null"]},
            {"name": "s", "type": ["string", "null"]},
            {"name": "p", "type": "int"},
        ],
    }
    table = pa.table({"a": [1, None], "s": [None, "z"], "p": pa.array([3, -3], pa.int32())})
    data, offsets = encode_records(table, schema)
    assert data.to_pybytes() == b"\x00\x02\x02\x06" + b"\x02\x00\x02z\x05"
    assert _fastavro_rows(data, offsets, schema)[1] == {"a": None, "s": "z", "p": -3}
    assert decode_records(data, offsets, schema).to_pylist() == table.to_pylist()


def test_reader_schema_fixes_types_and_columns() -> None:
    table = pa.table({"k": pa.array([1, -2], pa.int8()), "gone": ["a", "b"]})
    schema = arrow_to_avro_schema(table.schema, "t")
    data, offsets = encode_records(table, schema)
    reader = pa.schema([("new", pa.string()), ("k", pa.int8())])
    back = decode_records(data, offsets, schema, reader)
    assert back.schema == reader
    assert back.to_pydict() == {"new": [None, None], "k": [1, -2]}
    with pytest.raises(SchemaMismatchError, match="'k'"):
        decode_records(data, offsets, schema, pa.schema([("k", pa.uint8())]))


def test_missing_nullable_column_is_written_null() -> None:
    table = pa.table({"a": [1, 2]})
    schema = arrow_to_avro_schema(pa.schema([("a", pa.int64()), ("b", pa.string())]), "t")
    data, offsets = encode_records(table, schema)
    assert decode_records(data, offsets, schema).to_pydict() == {"a": [1, 2], "b": [None, None]}


def test_timestamps_of_any_unit_become_microseconds() -> None:
    ns = pa.array([1_700_000_000_123_456_789, None], pa.timestamp("ns"))
    ms = pa.array([-1, 1_700_000_000_123], pa.timestamp("ms", "Europe/Paris"))
    table = pa.table({"ns": ns, "ms": ms})
    schema = arrow_to_avro_schema(table.schema, "t")
    data, offsets = encode_records(table, schema)
    rows = _fastavro_rows(data, offsets, schema)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    assert rows[0]["ns"] == epoch + dt.timedelta(microseconds=1_700_000_000_123_456)  # ns cut
    assert rows[0]["ms"] == epoch - dt.timedelta(milliseconds=1)
    back = decode_records(data, offsets, schema)
    assert back.schema.field("ns").type == pa.timestamp("us", "UTC")


def test_dictionary_and_chunked_columns() -> None:
    zeros = pa.array(np.zeros(5, np.int32))
    constant = pa.DictionaryArray.from_arrays(zeros, ["20250101000000000"])
    indices = pa.array([0, 1, None, 1, 0], pa.int8())
    few = pa.DictionaryArray.from_arrays(indices, ["p", "a long partition value"])
    chunked = pa.chunked_array([["a", "bb"], ["ccc", None, "e" * 40]])
    numbers = pa.chunked_array([[1, 2], [3, 4, 5]])
    table = pa.table({"c": constant, "f": few, "x": chunked, "n": numbers})
    plain = [("c", pa.string()), ("f", pa.string()), ("x", pa.string()), ("n", pa.int64())]
    schema = arrow_to_avro_schema(pa.schema(plain), "t")
    data, offsets = encode_records(table, schema)
    expected = {
        "c": ["20250101000000000"] * 5,
        "f": ["p", "a long partition value", None, "a long partition value", "p"],
        "x": ["a", "bb", "ccc", None, "e" * 40],
        "n": [1, 2, 3, 4, 5],
    }
    assert [r for r in _fastavro_rows(data, offsets, schema)] == [
        dict(zip(expected, v, strict=True)) for v in zip(*expected.values(), strict=True)
    ]
    assert decode_records(data, offsets, schema).to_pydict() == expected


def test_many_rows_cross_chunks_and_varint_sizes() -> None:
    rng = np.random.default_rng(7)
    n = 70_000  # more than one encode and decode chunk
    values = rng.integers(-(2**62), 2**62, n) >> rng.integers(0, 62, n)
    strings = pa.array([("x" * int(k)) if k % 9 else None for k in rng.integers(0, 200, n)])
    table = pa.table({"v": values, "s": strings, "f": rng.random(n)})
    schema = arrow_to_avro_schema(table.schema, "t")
    data, offsets = encode_records(table, schema)
    sample = rng.integers(0, n, 200)
    rows = _fastavro_rows(data, offsets, schema)
    assert [rows[i] for i in sample] == [table.slice(int(i), 1).to_pylist()[0] for i in sample]
    assert decode_records(data, offsets, schema).equals(table)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (pa.table({"a": ["1"]}), "column 'a'.*string"),
        (pa.table({"a": pa.array([1.5])}), "column 'a'"),
    ],
)
def test_mismatched_columns_are_refused(table: pa.Table, message: str) -> None:
    schema = arrow_to_avro_schema(pa.schema([("a", pa.int64())]), "t")
    with pytest.raises(SchemaMismatchError, match=message):
        encode_records(table, schema)


def test_nulls_in_a_non_nullable_field_are_refused() -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}]}
    with pytest.raises(SchemaMismatchError, match="'a': row 1 is null"):
        encode_records(pa.table({"a": [1, None]}), schema)
    with pytest.raises(SchemaMismatchError, match="'a' is missing"):
        encode_records(pa.table({"b": [1]}), schema)


def test_empty_table() -> None:
    table = pa.table({"a": pa.array([], pa.int64())})
    schema = arrow_to_avro_schema(table.schema, "t")
    data, offsets = encode_records(table, schema)
    assert len(data) == 0 and offsets.tolist() == [0]
    assert decode_records(data, offsets, schema).num_rows == 0


def test_corrupt_records_are_reported_with_their_offset() -> None:
    table = pa.table({"a": [1, 2], "s": ["abc", "de"]})
    schema = arrow_to_avro_schema(table.schema, "t")
    data, offsets = encode_records(table, schema)
    raw = bytearray(data.to_pybytes())
    padded = raw[: offsets[1]] + b"\0" + raw[offsets[1] :]  # a byte after record 0's fields
    with pytest.raises(CorruptFileError, match="record length"):
        decode_records(bytes(padded), np.array([0, offsets[1] + 1, len(padded)]), schema)
    raw[0] = 7  # no such union branch
    with pytest.raises(CorruptFileError, match="bad union branch byte 7") as info:
        decode_records(bytes(raw), offsets, schema, source="blk")
    assert info.value.path == "blk" and info.value.offset == 0
    raw[0], raw[3] = 2, 0x7E  # a string length far past the record
    with pytest.raises(CorruptFileError, match="'s'"):
        decode_records(bytes(raw), offsets, schema)
    with pytest.raises(InvalidArgumentError):
        decode_records(data, np.array([0, len(data) + 1]), schema)


def test_framed_records_between_head_and_tail() -> None:
    rng = np.random.default_rng(3)
    n = 40_000  # enough rows for the lane walk
    strings = [("y" * int(k)) for k in rng.integers(0, 300, n)]
    table = pa.table({"s": strings, "v": rng.integers(0, 9, n)})
    schema = arrow_to_avro_schema(table.schema, "t")
    sizes = []

    def head(size: int) -> bytes:
        sizes.append(size)
        return b"HEAD" + struct.pack(">q", size)

    data = encode_framed(table, schema, head, lambda size: struct.pack(">q", size) + b"TL")
    raw = data.to_pybytes()
    body = raw[12:-10]
    assert raw[:4] == b"HEAD" and raw[-2:] == b"TL"
    assert struct.unpack(">q", raw[4:12])[0] == len(body) == sizes[-1]
    plain, offsets = encode_records(table, schema)
    first = struct.unpack(">i", body[:4])[0]
    assert first == offsets[1] and body[4 : 4 + first] == plain.to_pybytes()[:first]
    assert decode_framed(data.slice(12, len(body)), n, schema).equals(table)
    with pytest.raises(CorruptFileError):
        decode_framed(data.slice(12, len(body) - 1), n, schema)
    with pytest.raises(CorruptFileError):
        decode_framed(data.slice(12, len(body)), n + 1, schema)
