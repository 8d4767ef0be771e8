"""Hive's names for things: column types from Arrow types, and partition path escaping."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.types as pat

from memtier.errors import UnsupportedTableError

__all__ = ["escape_path_name", "hive_type"]

_SIMPLE: dict[pa.DataType, str] = {
    pa.bool_(): "boolean",
    pa.int8(): "tinyint",
    pa.int16(): "smallint",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.string(): "string",
    pa.large_string(): "string",
    pa.binary(): "binary",
    pa.large_binary(): "binary",
    pa.date32(): "date",
}


def hive_type(t: pa.DataType, column: str = "?") -> str:
    """The Hive type name of the Arrow type ``t`` (as Hudi's hive-sync writes it)."""
    if t in _SIMPLE:
        return _SIMPLE[t]
    if pat.is_timestamp(t):
        return "timestamp"
    if pat.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pat.is_list(t) or pat.is_large_list(t):
        return f"array<{hive_type(t.value_type, column)}>"
    if pat.is_map(t):
        return f"map<{hive_type(t.key_type, column)},{hive_type(t.item_type, column)}>"
    if pat.is_struct(t):
        fields = ",".join(f"{f.name}:{hive_type(f.type, column)}" for f in t)
        return f"struct<{fields}>"
    raise UnsupportedTableError(f"column {column!r} has type {t}, which has no Hive type to register")


# The characters Hive escapes as %XX in a partition directory name (FileUtils.escapePathName).
_ESCAPED = frozenset(
    [chr(c) for c in range(1, 32)] + ['"', "#", "%", "'", "*", "/", ":", "=", "?", "\\", "\x7f", "{", "[", "]", "^"]
)


def escape_path_name(value: str) -> str:
    """``value`` as Hive writes it in a ``column=value`` partition name."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)
