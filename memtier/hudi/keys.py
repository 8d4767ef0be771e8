"""Record keys, partition paths and bucket ids, computed as Hudi computes them.

* Record key: the key column's value as a string (``SimpleKeyGenerator``), or
  ``f1:v1,f2:v2`` for several columns (``ComplexKeyGenerator``, empty values as
  ``__empty__``). Null keys, and empty single-column keys, are refused.
* Bucket (``BucketIdentifier``): ``(hashCode(values) & 0x7fffffff) % buckets`` where
  ``values`` is the ``java.util.List<String>`` of key values Hudi parses back out of the
  record key (``KeyGenUtils.extractRecordKeysByFields``, Hudi 1.x rules) and Java hashes
  strings over UTF-16 code units. Computed with numpy over the Arrow string buffers;
  non-ASCII values, and values whose ``,``/``:`` make Hudi's parse differ, go one by one.
* Partition path: ``f=v`` (hive style) or ``v`` per column, joined by ``/``; null or
  empty values become ``__HIVE_DEFAULT_PARTITION__``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from memtier.errors import (
    InvalidArgumentError,
    InvalidRecordKeyError,
    InvalidRowError,
    SchemaMismatchError,
)

__all__ = [
    "KeyColumns",
    "check_keys",
    "DEFAULT_PARTITION",
    "bucket_ids",
    "java_string_hashes",
    "partition_paths",
    "record_keys",
    "whole",
]

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
EMPTY_KEY = "__empty__"
NULL_KEY = "__null__"

# ---------------------------------------------------------------------------------------
# Values as the strings Hudi makes of them
# ---------------------------------------------------------------------------------------


def _is_key_type(t: pa.DataType) -> bool:
    return (
        pat.is_string(t)
        or pat.is_large_string(t)
        or pat.is_signed_integer(t)
        or pat.is_boolean(t)
    )


def whole(column: pa.ChunkedArray) -> pa.Array:
    """``column`` as one array: its only chunk as it is (``combine_chunks`` copies even
    that one: on the write path a fresh copy of a key column a write, whose pages this VM
    faults in at ~5 us each), else its chunks concatenated."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _key_column(table: pa.Table, name: str) -> pa.Array:
    """A record-key column as strings, checked: present, of a key type, never null."""
    column = _checked_column(table, name)
    return column if pat.is_string(column.type) else column.cast(pa.string())


def _checked_column(table: pa.Table, name: str) -> pa.Array:
    """A record-key column as it is (dictionaries decoded), checked: present, of a key
    type, never null."""
    if name not in table.column_names:
        raise InvalidRecordKeyError(
            f"record key column {name!r} is missing (columns: {table.column_names})"
        )
    column = whole(table.column(name))
    value_type = column.type.value_type if pat.is_dictionary(column.type) else column.type
    if not _is_key_type(value_type):
        raise SchemaMismatchError(
            f"record key column {name!r} has type {column.type}; keys must be strings, "
            "signed integers or booleans"
        )
    if pat.is_dictionary(column.type):
        column = column.dictionary_decode()
    if column.null_count:
        row = _first(column.is_null())
        raise InvalidRecordKeyError(f"record key column {name!r} is null in row {row}")
    return column


def _first(mask: pa.Array) -> int:
    return int(np.flatnonzero(mask.to_numpy(zero_copy_only=False))[0])


def _key_values(table: pa.Table, key_fields: Sequence[str]) -> list[pa.Array]:
    """Each key column as strings; a single empty key is refused (Hudi does too)."""
    if not key_fields:
        raise InvalidRecordKeyError("no record key columns given")
    values = [_key_column(table, name) for name in key_fields]
    if len(values) == 1:
        _refuse_empty(values[0], key_fields[0])
    return values


def _refuse_empty(column: pa.Array, name: str) -> None:
    empty = pc.equal(pc.binary_length(column), 0)
    if pc.any(empty).as_py():
        raise InvalidRecordKeyError(f"record key column {name!r} is empty in row {_first(empty)}")


def check_keys(table: pa.Table, key_fields: Sequence[str]) -> None:
    """Refuse the record keys :meth:`KeyColumns.of` refuses, without making their strings
    (an integer or boolean key is never empty)."""
    if not key_fields:
        raise InvalidRecordKeyError("no record key columns given")
    columns = [_checked_column(table, name) for name in key_fields]
    if len(columns) == 1 and not pat.is_integer(columns[0].type) and not pat.is_boolean(columns[0].type):
        _refuse_empty(columns[0], key_fields[0])


@dataclass(frozen=True)
class KeyColumns:
    """A batch's record-key columns as the strings Hudi makes of them, validated once:
    the record keys and the bucket ids both derive from them."""

    fields: tuple[str, ...]
    values: tuple[pa.Array, ...]

    @classmethod
    def of(cls, table: pa.Table, key_fields: Sequence[str]) -> KeyColumns:
        return cls(tuple(key_fields), tuple(_key_values(table, key_fields)))

    def record_keys(self) -> pa.StringArray:
        """The ``_hoodie_record_key`` of every row."""
        if len(self.values) == 1:
            return self.values[0]
        parts: list[pa.Array | pa.Scalar] = []
        for i, (name, column) in enumerate(zip(self.fields, self.values, strict=True)):
            empty = pc.equal(pc.binary_length(column), 0)
            column = pc.if_else(empty, pa.scalar(EMPTY_KEY), column)
            parts += [pa.scalar(f"{',' if i else ''}{name}:"), column]
        return pc.binary_join_element_wise(*parts, "")

    def bucket_ids(self, num_buckets: int) -> np.ndarray:
        """The Hudi bucket index bucket (int32) of every row."""
        if num_buckets <= 0:
            raise InvalidArgumentError(f"the number of buckets must be positive, got {num_buckets}")
        values = list(self.values)
        h = np.ones(len(values[0]), np.uint32)
        for column in values:
            h = h * np.uint32(31) + java_string_hashes(column)
        odd = _parsed_apart(values)
        if odd.any():
            keys = self.record_keys()
            for row in np.flatnonzero(odd):
                h[row] = _list_hash(_hudi_key_values(keys[int(row)].as_py(), self.fields))
        return _buckets_of(h, num_buckets)


def record_keys(table: pa.Table, key_fields: Sequence[str]) -> pa.StringArray:
    """The ``_hoodie_record_key`` of every row."""
    return KeyColumns.of(table, key_fields).record_keys()


# ---------------------------------------------------------------------------------------
# Bucket ids: Java's List<String>.hashCode, vectorized
# ---------------------------------------------------------------------------------------

_INVERSE_31 = pow(31, -1, 2**32)


class _Powers:
    """31**i and 31**-i modulo 2**32, for i up to the longest buffer seen so far."""

    def __init__(self) -> None:
        self.up = np.ones(1, np.uint32)
        self.down = np.ones(1, np.uint32)

    def upto(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if len(self.up) < n:
            size = max(n, 2 * len(self.up))
            up = np.full(size, 31, np.uint32)
            up[0] = 1
            down = np.full(size, _INVERSE_31, np.uint32)
            down[0] = 1
            self.up, self.down = np.cumprod(up, dtype=np.uint32), np.cumprod(down, dtype=np.uint32)
        return self.up[:n], self.down[:n]


_POWERS = _Powers()


def _java_hash(text: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, modulo 2**32 (unsigned here)."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h


_HASH_ROWS = 1 << 15  # values hashed together: their bytes and sums stay in the CPU cache


def java_string_hashes(column: pa.Array) -> np.ndarray:
    """Java String.hashCode of every value (uint32), vectorized over the UTF-8 bytes.

    With ``w[g] = byte[g] * 31**-g`` and prefix sums ``S``, a value spanning bytes
    ``[a, b)`` hashes to ``(S[b] - S[a]) * 31**(b-1)``, all modulo 2**32. That equals the
    Java hash when the bytes are ASCII; other values are hashed one by one.
    """
    offsets = np.frombuffer(column.buffers()[1], np.int32)
    offsets = offsets[column.offset : column.offset + len(column) + 1].astype(np.int64)
    data = column.buffers()[2]
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    hashes = np.empty(len(column), np.uint32)
    for lo in range(0, len(column), _HASH_ROWS):
        hi = min(len(column), lo + _HASH_ROWS)
        start = offsets[lo]
        chunk = raw[start : offsets[hi]]
        up, down = _POWERS.upto(len(chunk) + 1)
        sums = np.zeros(len(chunk) + 1, np.uint32)
        np.cumsum(np.multiply(chunk, down[: len(chunk)], dtype=np.uint32), out=sums[1:])
        a, b = offsets[lo:hi] - start, offsets[lo + 1 : hi + 1] - start
        hashes[lo:hi] = np.where(a < b, (sums[b] - sums[a]) * up[np.maximum(b - 1, 0)], 0)
        if len(chunk) and chunk.max() >= 0x80:  # some values are not ASCII: hash exactly
            wide = np.concatenate([[0], np.cumsum(chunk >= 0x80)])
            for row in np.flatnonzero(wide[b] > wide[a]) + lo:
                hashes[row] = _java_hash(column[int(row)].as_py())
    return hashes


def _hudi_key_values(record_key: str, fields: Sequence[str]) -> list[str | None]:
    """The key values Hudi 1.x parses out of a record key for the bucket hash
    (``KeyGenUtils.extractRecordKeysByFields``): the whole key unless it holds both
    ``,`` and ``:``; else the values of ``fields`` in ``f:v,f:v``, where a value runs to
    the last ``,`` before the next ``:`` (so values may hold ``:``), ``__null__`` is null
    and ``__empty__`` empty."""
    if "," not in record_key or ":" not in record_key:
        return [record_key]
    values: list[str | None] = []
    at = 0
    while at < len(record_key):
        colon = record_key.find(":", at)
        if colon < 0:
            break
        field = record_key[at:colon]
        following = record_key.find(":", colon + 1)
        comma = record_key.rfind(",", 0, following) if following >= 0 else -1
        while following >= 0 and comma < colon:  # a ':' inside this value: look further
            following = record_key.find(":", following + 1)
            comma = record_key.rfind(",", 0, following) if following >= 0 else -1
        value, at = (
            (record_key[colon + 1 : comma], comma + 1)
            if following >= 0 and comma > 0
            else (record_key[colon + 1 :], len(record_key))
        )
        if not fields or field in fields:
            values.append(None if value == NULL_KEY else "" if value == EMPTY_KEY else value)
    return values or [record_key]


def _list_hash(values: Sequence[str | None]) -> int:
    h = 1
    for value in values:
        h = (31 * h + (0 if value is None else _java_hash(value))) & 0xFFFFFFFF
    return h


def _holding(column: pa.Array, char: str) -> np.ndarray:
    """Per value: whether it holds the ASCII character ``char``."""
    offsets = np.frombuffer(column.buffers()[1], np.int32)
    offsets = offsets[column.offset : column.offset + len(column) + 1]
    data = column.buffers()[2]
    raw = np.frombuffer(data, np.uint8)[offsets[0] : offsets[-1]] if data is not None else None
    hits = None if raw is None else raw == ord(char)
    if hits is None or not hits.any():
        return np.zeros(len(column), bool)
    counts = np.concatenate([[0], np.cumsum(hits)])
    return counts[offsets[1:] - offsets[0]] > counts[offsets[:-1] - offsets[0]]


def _parsed_apart(values: list[pa.Array]) -> np.ndarray:
    """Rows whose key Hudi does not parse back into exactly these values."""
    if len(values) == 1:
        return _holding(values[0], ",") & _holding(values[0], ":")
    odd = np.zeros(len(values[0]), bool)
    for column in values:
        odd |= _holding(column, ",") | _holding(column, ":")
        for placeholder in (NULL_KEY, EMPTY_KEY):
            odd |= pc.equal(column, placeholder).to_numpy(zero_copy_only=False)
    return odd


def bucket_ids(table: pa.Table, key_fields: Sequence[str], num_buckets: int) -> np.ndarray:
    """The Hudi bucket index bucket (int32) of every row; a single integer key column is
    hashed as its decimal strings would be, without making them."""
    if len(key_fields) == 1:
        column = _checked_column(table, key_fields[0])
        if pat.is_integer(column.type):
            if num_buckets <= 0:
                raise InvalidArgumentError(f"the number of buckets must be positive, got {num_buckets}")
            h = _integer_hashes(column.to_numpy())
            h += np.uint32(31)  # List.hashCode of one value
            return _buckets_of(h, num_buckets)
    return KeyColumns.of(table, key_fields).bucket_ids(num_buckets)


def _buckets_of(hashes: np.ndarray, num_buckets: int) -> np.ndarray:
    """Hudi's bucket (int32) of each key hash (uint32, List.hashCode): the hash without its
    sign bit modulo the bucket count; a mask when the count is a power of two (the same
    bucket, ~3 us for 10,000 keys where the modulo takes ~17). Overwrites ``hashes``."""
    if num_buckets & (num_buckets - 1) == 0:
        hashes &= np.uint32(num_buckets - 1)
    else:
        hashes &= np.uint32(0x7FFFFFFF)
        hashes %= np.uint32(num_buckets)
    return hashes.view(np.int32)


def _digit_tables() -> tuple[np.ndarray, np.ndarray]:
    """For 0..9999: the Java hashes of the value unpadded then zero-padded to 4 digits
    (one table, padded ones at 10,000 + value), and the unpadded lengths."""
    hashes = np.zeros(20_000, np.uint32)
    length = np.zeros(10_000, np.int64)
    for value in range(10_000):
        hashes[value] = _java_hash(str(value))
        hashes[10_000 + value] = _java_hash(f"{value:04d}")
        length[value] = len(str(value))
    return hashes, length


_DIGITS = _digit_tables()
#: 31**i modulo 2**32 for the at most 20 characters of an int64 in decimal.
_POWERS_31 = np.cumprod(np.r_[1, np.full(20, 31)].astype(np.uint32), dtype=np.uint32)


def _integer_hashes(values: np.ndarray) -> np.ndarray:
    """Java String.hashCode (uint32) of each integer's decimal string, four digits at a
    time from the right: hash(prefix + suffix) = hash(prefix) * 31**len(suffix) +
    hash(suffix)."""
    table, length = _DIGITS
    values = values.astype(np.int64, copy=False)
    if len(values) and values.min() >= 0 and values.max() < 100_000_000:  # most ids: two chunks at most
        high = values // 10_000  # (a division by a constant and a multiply: half of divmod's time)
        low = values - high * 10_000
        both = table[high] * _POWERS_31[4] + table[10_000 + low]
        return both if high.min() > 0 else np.where(high > 0, both, table[low])
    rest = np.abs(values)  # int64's minimum stays negative: hashed on its own below
    hashes = np.zeros(len(values), np.uint32)
    done = np.zeros(len(values), np.int64)  # characters hashed so far
    rows: np.ndarray | None = None  # rows still holding digits (None: all of them)
    while True:
        chunk = rest % 10_000
        rest //= 10_000
        more = rest > 0
        part = table[chunk + 10_000 * more] * _POWERS_31[done if rows is None else done[rows]]
        width = np.where(more, 4, length[chunk])
        if rows is None:
            hashes += part
            done += width
        else:
            hashes[rows] += part
            done[rows] += width
        if not more.any():
            break
        if not more.all():
            rows = np.flatnonzero(more) if rows is None else rows[more]
            rest = rest[more]
    minus = np.flatnonzero(values < 0)
    hashes[minus] += np.uint32(ord("-")) * _POWERS_31[done[minus]]
    for row in np.flatnonzero(values == np.iinfo(np.int64).min):
        hashes[row] = _java_hash(str(values[row]))
    return hashes


# ---------------------------------------------------------------------------------------
# Partition paths
# ---------------------------------------------------------------------------------------


def _partition_strings(name: str, values: pa.Array) -> list[str]:
    """The distinct values of a partition column as path segments (nulls included)."""
    t = values.type
    if not (_is_key_type(t) or pat.is_date32(t)):
        raise SchemaMismatchError(
            f"partition column {name!r} has type {t}; partition values must be strings, "
            "signed integers, booleans or dates"
        )
    strings = []
    for value in values.to_pylist():
        if value is None or value == "":
            strings.append(DEFAULT_PARTITION)
        elif isinstance(value, bool):
            strings.append("true" if value else "false")
        else:  # dates as ISO yyyy-mm-dd, integers in decimal
            strings.append(value.isoformat() if isinstance(value, dt.date) else str(value))
    return strings


def partition_paths(
    table: pa.Table, partition_fields: Sequence[str], hive_style: bool
) -> pa.DictionaryArray:
    """The partition path of every row, dictionary-encoded (int32 indices into the
    distinct paths); ``""`` for every row of a non-partitioned table."""
    rows = table.num_rows
    if not partition_fields:
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array([""]))
    codes = np.zeros(rows, np.int64)
    segments: list[list[str]] = []
    for name in partition_fields:
        if name not in table.column_names:
            raise SchemaMismatchError(f"partition column {name!r} is missing")
        column = whole(table.column(name))
        if pat.is_dictionary(column.type):
            column = column.dictionary_decode()
        encoded = pc.dictionary_encode(column, null_encoding="encode")
        strings = _partition_strings(name, encoded.dictionary)
        bad = [i for i, s in enumerate(strings) if "/" in s or s in (".", "..")]
        if bad:
            row = _first(pc.equal(encoded.indices, bad[0]))
            raise InvalidRowError(
                f"partition column {name!r} holds {strings[bad[0]]!r} in row {row}: "
                "a partition value must not contain '/' nor be '.' or '..' (it names a folder)"
            )
        segments.append([f"{name}={s}" if hive_style else s for s in strings])
        codes = codes * len(strings) + encoded.indices.to_numpy(zero_copy_only=False)
    distinct = pc.dictionary_encode(pa.array(codes))
    paths = []
    for code in distinct.dictionary.to_pylist():
        parts = []
        for options in reversed(segments):
            code, index = divmod(code, len(options))
            parts.append(options[index])
        paths.append("/".join(reversed(parts)))
    unique = {p: i for i, p in enumerate(dict.fromkeys(paths))}  # null and "" make one path
    remap = np.array([unique[p] for p in paths], np.int32)
    indices = remap[distinct.indices.to_numpy(zero_copy_only=False)]
    return pa.DictionaryArray.from_arrays(pa.array(indices), pa.array(list(unique), pa.string()))


# ---------------------------------------------------------------------------------------
# Bucket file ids
# ---------------------------------------------------------------------------------------
