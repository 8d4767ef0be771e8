"""Field plans: how each Avro field of a record schema is laid out, flat or nested."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import fastavro

from memtier.errors import SchemaMismatchError

_FLAT = frozenset({"boolean", "int", "long", "float", "double", "string", "bytes", "fixed"})


_RAW_WIDTH = {"boolean": 1, "float": 4, "double": 8}


@dataclass(frozen=True)
class _Field:
    """One field of a record schema, as the codec lays it out."""

    name: str
    kind: str  # a _FLAT kind, or "nested" (fastavro, row by row)
    null_byte: int | None  # flat kinds: the union branch byte of null; None: no null
    value_byte: int | None  # flat kinds: the union branch byte of a value; None: no union
    null_bytes: bytes | None  # what a null encodes to; None: the field cannot be null
    logical: str | None = None
    size: int = 0  # fixed size
    precision: int = 0
    scale: int = 0
    avro: Any = None  # nested kind: the field's Avro type, parsed by fastavro


def _flat_type(avro: Any) -> tuple[str, dict] | None:
    """(kind, attributes) of a flat Avro type, None for anything the fast path skips."""
    if isinstance(avro, str):
        return (avro, {}) if avro in _FLAT and avro != "fixed" else None
    if not isinstance(avro, dict) or avro.get("type") not in _FLAT:
        return None
    if avro["type"] == "bytes" and avro.get("logicalType") == "decimal":
        return None
    return avro["type"], avro


def _plan_field(field: dict, named: dict) -> _Field:
    avro = field["type"]
    union = avro if isinstance(avro, list) else None
    values = [i for i, b in enumerate(union or []) if b != "null"]
    null_index = union.index("null") if union and "null" in union else None
    null_bytes = None if null_index is None else bytes([2 * null_index])
    flat = _flat_type(avro if union is None else (union[values[0]] if len(values) == 1 else None))
    if flat is None:
        try:
            parsed = fastavro.parse_schema(avro, named_schemas=named)
        except Exception as e:  # fastavro's schema errors share no base class
            raise SchemaMismatchError(f"field {field['name']!r}: bad Avro type: {e}") from e
        null_bytes = b"" if avro == "null" else null_bytes
        return _Field(field["name"], "nested", None, None, null_bytes, avro=parsed)
    kind, attrs = flat
    return _Field(
        field["name"],
        kind,
        None if null_index is None else 2 * null_index,
        None if union is None else 2 * values[0],
        null_bytes,
        logical=attrs.get("logicalType"),
        size=int(attrs.get("size", 0)),
        precision=int(attrs.get("precision", 0)),
        scale=int(attrs.get("scale", 0)),
    )


def _plan(schema: dict) -> tuple[_Field, ...]:
    named: dict = {}
    return tuple(_plan_field(f, named) for f in schema["fields"])
