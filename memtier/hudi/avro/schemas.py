"""Arrow <-> Avro binary datums, vectorized, the way Spark + Hudi write them.

Schemas follow Spark's ``SchemaConverters`` naming as Hudi stores it: record
``<table>_record`` in namespace ``hoodie.<table>``, every field ``["null", T]`` defaulting
to null, nested records named after their field, decimals as a ``fixed`` named ``fixed``.
Datums are schemaless Avro binary: no container, no sync marker.

Encoding never loops over rows in Python. Every field of a row becomes one or two byte
*pieces*: up to 12 bytes held in two uint64 lanes (union branch, varint, fixed-width
value, short constants), or an Arrow binary view (string data, long constants). Small
pieces are fused into one, the pieces of a chunk of rows are written as binary views, and
one Arrow cast from ``binary_view`` to ``binary`` lays them out contiguously in C++.
Decoding moves one cursor per row through the fields in lockstep; strings are gathered by
one Arrow ``take``. Nested types (record, array, map, enum, unions of several types)
take the slow path: fastavro, row by row.

Framed records (int32 big-endian length + datum, as in Hudi's Avro log blocks) are found
without a sequential walk when there are many: lanes walk from plausible record starts in
lockstep and prove each other (see :func:`_frame_starts`).

Timestamps are written as ``timestamp-micros`` (or what the writer schema says);
nanosecond values are truncated to microseconds, as Arrow's unsafe cast does.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.types as pat

from memtier.errors import SchemaMismatchError

META_FIELDS: tuple[str, ...] = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)


_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
}


_LOGICAL: dict[tuple[str, str], pa.DataType] = {
    ("int", "date"): pa.date32(),
    ("int", "time-millis"): pa.time32("ms"),
    ("long", "time-micros"): pa.time64("us"),
    ("long", "timestamp-millis"): pa.timestamp("ms", "UTC"),
    ("long", "timestamp-micros"): pa.timestamp("us", "UTC"),
    ("long", "local-timestamp-millis"): pa.timestamp("ms"),
    ("long", "local-timestamp-micros"): pa.timestamp("us"),
    ("string", "uuid"): pa.string(),
}


def decimal_size(precision: int) -> int:
    """Fewest bytes whose two's complement holds every ``precision``-digit value."""
    size = 1
    while 2 ** (8 * size - 1) < 10**precision:
        size += 1
    return size


def arrow_to_avro_schema(schema: pa.Schema, table_name: str) -> dict:
    """The Avro schema Spark + Hudi derive for ``schema`` (without meta fields)."""
    namespace, name = f"hoodie.{table_name}", f"{table_name}_record"
    fields = [_avro_field(f.name, f.type, f"{namespace}.{name}", f.name) for f in schema]
    return {"type": "record", "name": name, "namespace": namespace, "fields": fields}


def _avro_field(name: str, arrow_type: pa.DataType, namespace: str, path: str) -> dict:
    avro = _avro_type(arrow_type, name, namespace, path)
    return {"name": name, "type": ["null", avro], "default": None}


def _avro_type(t: pa.DataType, name: str, namespace: str, path: str) -> Any:
    """Spark's ``toAvroType(t, recordName=name, nameSpace=namespace)``, always nullable."""
    if pat.is_dictionary(t):
        return _avro_type(t.value_type, name, namespace, path)
    if pat.is_boolean(t):
        return "boolean"
    if t in (pa.int8(), pa.int16(), pa.int32()):
        return "int"
    if t == pa.int64():
        return "long"
    if t == pa.float32():
        return "float"
    if t == pa.float64():
        return "double"
    if pat.is_string(t) or pat.is_large_string(t):
        return "string"
    if pat.is_binary(t) or pat.is_large_binary(t):
        return "bytes"
    if pat.is_decimal128(t):
        return {
            "type": "fixed",
            "name": "fixed",
            "namespace": f"{namespace}.{name}",
            "size": decimal_size(t.precision),
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    if pat.is_date32(t):
        return {"type": "int", "logicalType": "date"}
    if pat.is_timestamp(t):
        return {"type": "long", "logicalType": "timestamp-micros"}
    if pat.is_struct(t):
        inner = f"{namespace}.{name}"
        fields = [_avro_field(c.name, c.type, inner, f"{path}.{c.name}") for c in t]
        return {"type": "record", "name": name, "namespace": namespace, "fields": fields}
    if pat.is_list(t) or pat.is_large_list(t):
        return {"type": "array", "items": ["null", _avro_type(t.value_type, name, namespace, path)]}
    if pat.is_map(t):
        if not (pat.is_string(t.key_type) or pat.is_large_string(t.key_type)):
            raise SchemaMismatchError(f"column {path!r}: map keys must be strings for Avro, got {t.key_type}")
        return {"type": "map", "values": ["null", _avro_type(t.item_type, name, namespace, path)]}
    raise SchemaMismatchError(f"column {path!r}: Arrow type {t} has no Avro equivalent in Hudi")


def _parse(avro: dict | str) -> dict:
    schema = json.loads(avro) if isinstance(avro, str) else avro
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise SchemaMismatchError(f"an Avro record schema is required, got {str(avro)[:200]}")
    return schema


def avro_to_arrow_schema(avro: dict | str) -> pa.Schema:
    """The Arrow schema of an Avro record schema (either union order, Spark or Hudi style)."""
    schema = _parse(avro)
    named: dict[str, pa.DataType] = {}
    namespace = schema.get("namespace", "")
    return pa.schema([_arrow_field(f, named, namespace, f["name"]) for f in schema["fields"]])


def _arrow_field(field: dict, named: dict[str, pa.DataType], namespace: str, path: str) -> pa.Field:
    arrow_type, nullable = _arrow_type(field["type"], named, namespace, path)
    return pa.field(field["name"], arrow_type, nullable)


def _space(avro: dict, namespace: str) -> str:
    """The namespace of a named type (from a dotted name, its own, or the enclosing one)."""
    name = avro["name"]
    return name.rpartition(".")[0] if "." in name else avro.get("namespace", namespace)


def _register(avro: dict, arrow_type: pa.DataType, named: dict, namespace: str) -> None:
    """Remembers a named type by its short and its full name."""
    space, short = _space(avro, namespace), avro["name"].rpartition(".")[2]
    named[short] = arrow_type
    named[f"{space}.{short}" if space else short] = arrow_type


def _arrow_type(
    avro: Any, named: dict[str, pa.DataType], namespace: str, path: str
) -> tuple[pa.DataType, bool]:
    """(Arrow type, nullable) of an Avro type."""
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1:
            raise SchemaMismatchError(f"field {path!r}: union {avro} has no single Arrow type")
        arrow_type, _ = _arrow_type(branches[0], named, namespace, path)
        return arrow_type, len(branches) < len(avro)
    if isinstance(avro, str):
        if avro in _PRIMITIVES:
            return _PRIMITIVES[avro], avro == "null"
        if avro in named or f"{namespace}.{avro}" in named:
            return named.get(avro, named.get(f"{namespace}.{avro}")), False
        raise SchemaMismatchError(f"field {path!r}: unknown Avro type {avro!r}")
    kind, logical = avro.get("type"), avro.get("logicalType")
    if logical == "decimal" and kind in ("fixed", "bytes"):
        arrow_type = (pa.decimal128 if avro["precision"] <= 38 else pa.decimal256)(
            avro["precision"], avro.get("scale", 0)
        )
    elif (kind, logical) in _LOGICAL:
        arrow_type = _LOGICAL[(kind, logical)]
    elif kind in _PRIMITIVES:
        return _arrow_type(kind, named, namespace, path)
    elif kind == "record":
        space = _space(avro, namespace)
        fields = [_arrow_field(f, named, space, f"{path}.{f['name']}") for f in avro["fields"]]
        arrow_type = pa.struct(fields)
    elif kind == "array":
        item, nullable = _arrow_type(avro["items"], named, namespace, path)
        arrow_type = pa.list_(pa.field("element", item, nullable))
    elif kind == "map":
        value, nullable = _arrow_type(avro["values"], named, namespace, path)
        arrow_type = pa.map_(pa.string(), pa.field("value", value, nullable))
    elif kind == "enum":
        arrow_type = pa.string()
    elif kind == "fixed":
        arrow_type = pa.binary(avro["size"])
    else:
        raise SchemaMismatchError(f"field {path!r}: unsupported Avro type {avro}")
    if kind in ("record", "enum", "fixed"):
        _register(avro, arrow_type, named, namespace)
    return arrow_type, False


def with_meta_fields(avro_schema: dict) -> dict:
    """``avro_schema`` with Hudi's five meta fields in front, as in log block SCHEMA headers."""
    meta = [{"name": name, "type": ["null", "string"], "doc": "", "default": None} for name in META_FIELDS]
    rest = [f for f in avro_schema["fields"] if f["name"] not in META_FIELDS]
    return {**avro_schema, "fields": [*meta, *rest]}
