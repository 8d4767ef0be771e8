"""The content of a Hudi DELETE block: a ``HoodieDeleteRecordList`` Avro datum, each
deleted key with its partition path and ordering value.

The ordering value is an Avro union. Apache Hudi 1.0 (and hudi-rs 0.5) read and write
it as a union of wrapper records (``IntWrapper``, ``LongWrapper``, ...), each record of
one ``value`` field, so its bytes are the branch index, then the bare value. memtier
writes that layout. Before, memtier wrote the branches of a plain union of primitive
types (``int``, ``long``, ...), which Hudi 1.0 decodes as the wrapper at the same index:
another type (an ``Integer`` for a ``long`` field: Hudi failed with a ClassCastException).
Reading takes both: a branch that is the plain union's for the table's ordering field
type, and another type in the wrapper union, is read as memtier once wrote it.

A delete "in commit order" carries the integer 0 (branch 2: ``IntWrapper`` in Hudi 1.0,
``long`` in the plain union; the same bytes) whatever the ordering field's type, as Hudi
writes it; without an ordering field, null.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from memtier.errors import SchemaMismatchError
from memtier.hudi.avro import avro_long, encode_records

__all__ = ["decode_delete_records", "encode_delete_records"]

#: Hudi 1.0's orderingVal union: the wrapped type of each branch, in order.
WRAPPER_UNION = (
    "null", "boolean", "int", "long", "float", "double", "bytes", "string", "date", "decimal",
    "time-micros", "timestamp-micros",
)
#: The plain union memtier wrote before (and hudi-rs before 0.5 read).
PLAIN_UNION = (
    "null", "int", "long", "float", "double", "bytes", "string", "decimal", "date", "time-millis",
    "time-micros", "timestamp-millis", "timestamp-micros",
)
_COMMIT_ORDER = avro_long(WRAPPER_UNION.index("int")) + avro_long(0)
#: Kinds written with each delete's own value, as Apache Hudi's Spark writer writes them
#: (Spark's value of the field, wrapped): (wrapper, Avro type of the value, its Arrow
#: type). Deletes of other kinds are written in commit order.
_ORDERED = {
    "int": ("int", "int", pa.int32()),
    "long": ("long", "long", pa.int64()),
    "float": ("float", "float", pa.float32()),
    "double": ("double", "double", pa.float64()),
    "string": ("string", "string", pa.string()),
    "date": ("int", "int", pa.int32()),  # days
    "timestamp-micros": ("long", "long", pa.int64()),  # microseconds
}


def ordering_kind(ordering_type: pa.DataType | None) -> str:
    """The union branch (a :data:`WRAPPER_UNION` name) for an ordering field of this Arrow
    type, as this package's Avro schemas write the field (every timestamp in micros)."""
    t = ordering_type
    if t is None or pat.is_null(t):
        return "null"
    if pat.is_dictionary(t):
        return ordering_kind(t.value_type)
    checks: tuple[tuple[Callable[[pa.DataType], bool], str], ...] = (
        (pat.is_int64, "long"),
        (pat.is_signed_integer, "int"),
        (lambda x: x == pa.float32(), "float"),
        (pat.is_floating, "double"),
        (lambda x: pat.is_string(x) or pat.is_large_string(x), "string"),
        (lambda x: pat.is_binary(x) or pat.is_large_binary(x), "bytes"),
        (pat.is_decimal, "decimal"),
        (pat.is_date32, "date"),
        (pat.is_time32, "time-millis"),
        (pat.is_time64, "time-micros"),
        (pat.is_timestamp, "timestamp-micros"),
    )
    for check, kind in checks:
        if check(t):
            return kind
    raise SchemaMismatchError(f"an ordering field of type {t} has no Hudi delete ordering value")


def _per_row(table: pa.Table, fields: list[dict]) -> pa.Array:
    """Each row of ``table`` as the Avro bytes of a record of ``fields``."""
    data, offsets = encode_records(table, {"type": "record", "name": "r", "fields": fields})
    return pa.Array.from_buffers(pa.large_binary(), table.num_rows, [None, pa.py_buffer(offsets), data])


def _ordering_bytes(kind: str, values: pa.Array | None, rows: int) -> pa.Array:
    """Each delete's orderingVal bytes: the wrapper union's branch index, then its value;
    Hudi's commit-order zero where the value is null (or the field's kind has no
    wrapper Hudi's Spark writer uses)."""
    zero = pa.scalar(avro_long(0) if kind == "null" else _COMMIT_ORDER, pa.large_binary())
    if values is None or kind not in _ORDERED or values.null_count == rows:
        return pa.repeat(zero, rows)
    wrapper, avro_type, arrow_type = _ORDERED[kind]
    if pat.is_dictionary(values.type):
        values = values.dictionary_decode()
    if pat.is_timestamp(values.type):
        values = values.cast(pa.timestamp("us", values.type.tz))
    values = values.cast(arrow_type)
    filled = pc.fill_null(values, pa.scalar("" if avro_type == "string" else 0, arrow_type))
    encoded = _per_row(pa.table({"value": filled}), [{"name": "value", "type": avro_type}])
    branch = pa.scalar(avro_long(WRAPPER_UNION.index(wrapper)), pa.large_binary())
    ordered = pc.binary_join_element_wise(branch, encoded, pa.scalar(b"", pa.large_binary()))
    return pc.if_else(values.is_valid(), ordered, zero)


def encode_delete_records(
    record_keys: pa.Array,
    partition_paths: pa.Array,
    ordering_type: pa.DataType | None,
    ordering_values: pa.Array | None = None,
) -> bytes:
    """The ``HoodieDeleteRecordList`` datum of these deletes, in Hudi 1.0's layout: each
    delete with its ordering value, in commit order where that is null or not given."""
    rows = len(record_keys)
    if rows != len(partition_paths):
        raise SchemaMismatchError(f"{rows} record keys but {len(partition_paths)} partition paths")
    if ordering_values is not None and len(ordering_values) != rows:
        raise SchemaMismatchError(f"{rows} record keys but {len(ordering_values)} ordering values")
    located = _per_row(
        pa.table({"recordKey": record_keys, "partitionPath": partition_paths}),
        [{"name": "recordKey", "type": ["null", "string"]}, {"name": "partitionPath", "type": ["null", "string"]}],
    )
    ordering = _ordering_bytes(ordering_kind(ordering_type), ordering_values, rows)
    items = pc.binary_join_element_wise(located, ordering, pa.scalar(b"", pa.large_binary()))
    offsets = np.frombuffer(items.buffers()[1], np.int64)[items.offset : items.offset + rows + 1]
    body = items.buffers()[2].to_pybytes()[offsets[0] : offsets[-1]] if rows else b""
    count = avro_long(rows) if rows else b""
    return count + body + b"\x00"  # one array block, then the end marker


class _Datum:
    """A cursor over Avro binary data."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def long(self) -> int:
        shift = z = 0
        while True:
            byte = self.data[self.at]
            self.at += 1
            z |= (byte & 0x7F) << shift
            if byte < 0x80:
                return (z >> 1) ^ -(z & 1)
            shift += 7

    def raw(self, size: int) -> bytes:
        if size < 0 or self.at + size > len(self.data):
            raise ValueError(f"{size} bytes at byte {self.at} run past the end")
        out = self.data[self.at : self.at + size]
        self.at += size
        return out

    def bytes(self) -> bytes:
        return self.raw(self.long())

    def optional_string(self) -> str | None:
        branch = self.long()
        if branch not in (0, 1):
            raise ValueError(f"union branch {branch} of a nullable string")
        return self.bytes().decode() if branch else None


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_READ: dict[str, Callable[[_Datum], object]] = {
    "null": lambda d: None,
    "boolean": lambda d: d.raw(1) != b"\x00",
    "int": _Datum.long,
    "long": _Datum.long,
    "float": lambda d: struct.unpack("<f", d.raw(4))[0],
    "double": lambda d: struct.unpack("<d", d.raw(8))[0],
    "bytes": _Datum.bytes,
    "string": lambda d: d.bytes().decode(),
    "decimal": lambda d: decimal.Decimal(int.from_bytes(d.bytes(), "big", signed=True)).scaleb(-15),
    "date": lambda d: datetime.date(1970, 1, 1) + datetime.timedelta(days=d.long()),
    "time-millis": lambda d: (datetime.datetime.min + datetime.timedelta(milliseconds=d.long())).time(),
    "time-micros": lambda d: (datetime.datetime.min + datetime.timedelta(microseconds=d.long())).time(),
    "timestamp-millis": lambda d: _EPOCH + datetime.timedelta(milliseconds=d.long()),
    "timestamp-micros": lambda d: _EPOCH + datetime.timedelta(microseconds=d.long()),
}


def _written_kind(ordering_type: pa.DataType | None) -> str:
    """:func:`ordering_kind`, or "null" for a type memtier never wrote ordering values of
    (a boolean, which Hudi wraps): its deletes are read in Hudi's layout only."""
    try:
        return ordering_kind(ordering_type)
    except SchemaMismatchError:
        return "null"


def _branches(ordering_type: pa.DataType | None) -> tuple[str, ...]:
    """What each orderingVal branch index holds in a table of this ordering field type:
    the wrapper union's kinds, but the plain union's where memtier wrote its own kind."""
    kinds = list(WRAPPER_UNION)
    kind = _written_kind(ordering_type)
    legacy = PLAIN_UNION.index(kind)
    if kind != "null" and (legacy >= len(kinds) or kinds[legacy] != kind):
        kinds.extend(["null"] * (legacy + 1 - len(kinds)))
        kinds[legacy] = kind
    return tuple(kinds)


def _ordering_array(values: list[object], ordering_type: pa.DataType | None) -> pa.Array:
    """The ordering values as one array: deletes in commit order (integer zeros among
    values of another type) null; strings when the rest have no common type. Dates and
    timestamps, which Hudi's Spark writer writes as integers, come back typed."""
    kind = _written_kind(ordering_type)
    integers = [isinstance(v, int) and not isinstance(v, bool) for v in values]
    if (kind in ("date", "timestamp-micros") or not all(integers)) and any(integers):
        values = [None if is_int and v == 0 else v for v, is_int in zip(values, integers, strict=True)]
    try:
        array = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values], pa.string())
    if kind == "date" and pat.is_integer(array.type):
        return array.cast(pa.int32()).cast(pa.date32())
    if kind == "timestamp-micros" and pat.is_integer(array.type):
        return array.cast(pa.int64()).cast(pa.timestamp("us", getattr(ordering_type, "tz", None)))
    return array


def decode_delete_records(datum: bytes, ordering_type: pa.DataType | None = None) -> pa.Table:
    """The deletes of a ``HoodieDeleteRecordList`` datum: ``record_key`` and
    ``partition_path`` strings and ``ordering_val`` (see :func:`_ordering_array`). Raises
    ValueError on bytes that are not one."""
    kinds = _branches(ordering_type)
    reader = _Datum(datum)
    keys: list[str | None] = []
    paths: list[str | None] = []
    ordering: list[object] = []
    try:
        while count := reader.long():
            if count < 0:  # a block with its byte size
                count = -count
                reader.long()
            for _ in range(count):
                keys.append(reader.optional_string())
                paths.append(reader.optional_string())
                branch = reader.long()
                if not 0 <= branch < len(kinds):
                    raise ValueError(f"orderingVal union branch {branch}")
                ordering.append(_READ[kinds[branch]](reader))
    except IndexError as e:
        raise ValueError("the records are cut off") from e
    if reader.at != len(datum):
        raise ValueError(f"{len(datum) - reader.at} bytes after the records")
    return pa.table(
        {
            "record_key": pa.array(keys, pa.string()),
            "partition_path": pa.array(paths, pa.string()),
            "ordering_val": _ordering_array(ordering, ordering_type),
        }
    )
