"""Encoding columns into byte *pieces* per row: one encoder per field (values, varints,
fixed widths, strings, dictionaries, constants; nested types through fastavro)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from memtier.errors import SchemaMismatchError
from memtier.hudi.avro.plans import _RAW_WIDTH, _Field, _plan
from memtier.hudi.avro.schemas import _PRIMITIVES, _parse
from memtier.hudi.avro.varints import _ZERO, _varint_size, _varint_words, _zigzag

_CHUNK_ROWS = 1 << 14  # rows encoded together: their pieces and views stay in the CPU cache


_INLINE = 12  # a binary view holds values of up to 12 bytes inside itself


@dataclass(frozen=True)
class _Run:
    """Per row, up to 12 bytes: the first ``lengths[i]`` bytes of the little-endian string
    held in two uint64 lanes (``low``: bytes 0-7, ``high``: bytes 8-11), zero past it."""

    low: np.ndarray | np.uint64
    high: np.ndarray | np.uint64
    width: int  # the longest row
    lengths: np.ndarray | int

    @classmethod
    def constant(cls, data: bytes) -> _Run:
        low = np.uint64(int.from_bytes(data[:8], "little"))
        return cls(low, np.uint64(int.from_bytes(data[8:], "little")), len(data), len(data))

    @classmethod
    def of_matrix(cls, matrix: np.ndarray, lengths: np.ndarray | int) -> _Run:
        """Rows of an (n, <= 12) uint8 matrix."""
        lanes = np.zeros((len(matrix), 2), np.uint64)
        lanes.view(np.uint8)[:, : matrix.shape[1]] = matrix
        return cls(lanes[:, 0], lanes[:, 1], matrix.shape[1], lengths)

    def then(self, run: _Run) -> _Run:
        """This run (all rows ``width`` bytes long) followed by ``run``."""
        k = self.width
        if k == 0:
            return run
        if k >= 8:
            low, high = self.low, self.high | (run.low << np.uint64(8 * (k - 8)))
        else:
            low = self.low | (run.low << np.uint64(8 * k))
            high = self.high
            if k + run.width > 8:
                high = high | (run.low >> np.uint64(64 - 8 * k)) | (run.high << np.uint64(8 * k))
        return _Run(low, high, k + run.width, self.lengths + run.lengths)


@dataclass(frozen=True)
class _Views:
    """Row i's bytes are what binary view ``views[i]`` points at in the layout's buffers."""

    views: np.ndarray  # (rows, 4) int32: length, prefix or inline bytes, buffer, offset


_Piece = _Run | _Views


@dataclass(frozen=True)
class _Shape:
    """What one piece of a field looks like in every chunk of rows."""

    views: bool  # a _Views piece (never fused with others)
    width: int = 0  # a run: its longest row
    fixed: bool = True  # a run: every row is ``width`` bytes
    constant: bool = False  # the same bytes in every row


def _mismatch(field: _Field, arrow_type: pa.DataType, cause: Exception | None = None) -> Exception:
    logical = f" ({field.logical})" if field.logical else ""
    detail = f": {cause}" if cause else ""
    return SchemaMismatchError(
        f"column {field.name!r}: Arrow type {arrow_type} cannot be written as Avro "
        f"{field.kind}{logical}{detail}"
    )


def _accepts(field: _Field, t: pa.DataType) -> bool:
    """Whether an Arrow column of type ``t`` may be written as ``field``."""
    logical = field.logical or ""
    if field.kind == "boolean":
        return pat.is_boolean(t)
    if field.kind in ("int", "long"):
        if logical == "date":
            return pat.is_date32(t) or pat.is_integer(t)
        if "timestamp" in logical:
            return pat.is_timestamp(t) or pat.is_integer(t)
        if logical.startswith("time-"):
            return pat.is_time(t) or pat.is_integer(t)
        return pat.is_integer(t)
    if field.kind in ("float", "double"):
        return pat.is_floating(t)
    if field.kind == "string":
        return pat.is_string(t) or pat.is_large_string(t)
    if field.kind == "bytes":
        return pat.is_binary(t) or pat.is_large_binary(t) or pat.is_fixed_size_binary(t)
    if logical == "decimal":
        return pat.is_decimal(t)
    return pat.is_fixed_size_binary(t) and t.byte_width == field.size


_STORED_AS = {name: t for name, t in _PRIMITIVES.items() if name != "null"}


def _physical(field: _Field, column: pa.Array) -> pa.Array:
    """``column`` cast to the Arrow type whose values the field writes (dictionaries of
    strings stay dictionaries)."""
    t = column.type
    if pat.is_dictionary(t) and field.kind not in ("string", "bytes"):
        column, t = column.dictionary_decode(), t.value_type
    value_type = t.value_type if pat.is_dictionary(t) else t
    if not _accepts(field, value_type):
        raise _mismatch(field, t)
    try:
        if pat.is_timestamp(t):  # to the unit the field stores; ns -> us truncates
            unit = "ms" if (field.logical or "").endswith("millis") else "us"
            column = column.cast(pa.timestamp(unit, t.tz), safe=False)
        elif pat.is_time(t):
            column = column.cast(pa.time32("ms") if field.kind == "int" else pa.time64("us"))
        if field.kind == "fixed":
            target = pa.decimal128(field.precision, field.scale) if field.logical else t
        else:
            target = _STORED_AS[field.kind]
        if pat.is_dictionary(t):
            target = pa.dictionary(t.index_type, target)
        return column if column.type == target else column.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise _mismatch(field, t, e) from e


def _views_of(array: pa.Array) -> tuple[np.ndarray, tuple[pa.Buffer, ...]]:
    """Binary views of a binary or string array: (n, 4) int32 and the buffers they use."""
    if not pat.is_binary_view(array.type):
        if pat.is_string(array.type) or pat.is_large_string(array.type):
            large = pat.is_large_string(array.type)
            array = array.view(pa.large_binary() if large else pa.binary())
        array = array.cast(pa.binary_view())
    buffers = array.buffers()
    views = np.frombuffer(buffers[1], np.int32).reshape(-1, 4)
    return views[array.offset : array.offset + len(array)], tuple(buffers[2:])


def _rebased(views: np.ndarray, base: int) -> np.ndarray:
    """``views`` pointing at buffer ``base + i`` instead of ``i`` (inline ones unchanged)."""
    if base == 0:
        return views
    moved = np.array(views)
    moved[:, 2] += np.where(views[:, 0] > _INLINE, base, 0).astype(np.int32)
    return moved


class _Buffers:
    """The buffers that binary views point at, each group registered once."""

    def __init__(self) -> None:
        self.all: list[pa.Buffer] = []
        self._index: dict[tuple[int, ...], int] = {}

    def add(self, buffers: tuple[pa.Buffer, ...]) -> int:
        """The index of the first of ``buffers`` (which keep their order)."""
        key = tuple(b.address for b in buffers)
        if key not in self._index:
            self._index[key] = len(self.all)
            self.all.extend(buffers)
        return self._index[key]

    def views(self, array: pa.Array) -> np.ndarray:
        """Views of a binary or string array, pointing at buffers registered here."""
        views, buffers = _views_of(array)
        return _rebased(views, self.add(buffers)) if buffers else views


class _Encoder:
    """The pieces of one field for a range of rows, shaped alike in every range."""

    shape: tuple[_Shape, ...]

    def bound(self) -> int:
        """At least the number of bytes the field takes in all rows."""
        raise NotImplementedError

    def pieces(self, lo: int, hi: int) -> list[_Piece]:
        raise NotImplementedError


def _nulls(field: _Field, column: pa.Array) -> bool:
    """Whether ``column`` has nulls (refused when the field cannot hold them)."""
    if column.null_count and field.null_bytes is None:
        row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise SchemaMismatchError(
            f"column {field.name!r}: row {row} is null but the Avro field is not nullable"
        )
    return column.null_count > 0


def _validity(column: pa.Array) -> np.ndarray | None:
    """Per-row validity of a range of rows, None when none is null."""
    return column.is_valid().to_numpy(zero_copy_only=False) if column.null_count else None


def _varint_sizes(lo: int | None, hi: int | None) -> tuple[int, int]:
    """Fewest and most bytes of the zigzag varints of integers between ``lo`` and ``hi``."""
    if lo is None or hi is None:  # no values at all
        return 1, 1
    ends = [_varint_size(int(_zigzag(np.array([v]))[0])) for v in (lo, hi)]
    return (1 if lo <= 0 <= hi else min(ends)), max(ends)


class _ValueEncoder(_Encoder):
    """One run per row: the union branch byte (if any), then the value's bytes."""

    def __init__(self, field: _Field, column: pa.Array, width: int, fixed: bool) -> None:
        self.field = field
        self.column = column
        self.branch = 0 if field.value_byte is None else 1
        self.shape = (_Shape(False, self.branch + width, fixed and not _nulls(field, column)),)

    def run(self, valid: np.ndarray | None, body: _Run) -> _Run:
        """``body`` (zero in null rows) behind the branch byte."""
        if not self.branch:
            return body
        if valid is None:
            return _Run.constant(bytes([self.field.value_byte])).then(body)
        branch = np.where(valid, self.field.value_byte, self.field.null_byte).astype(np.uint64)
        joined = _Run(branch, _ZERO, 1, 1).then(body)
        return _Run(joined.low, joined.high, joined.width, np.where(valid, joined.lengths, 1))

    def varints(self, values: np.ndarray, lo: int, hi: int) -> _Run:
        """The zigzag varints of ``values``, whose sizes lie in ``lo``..``hi``."""
        z = _zigzag(values)
        if lo == hi:  # equal sizes: the same fixed run in every chunk
            low, high, sizes = _varint_words(z, lo, hi)
        else:
            low, high, sizes = _varint_words(z, 1, _varint_size(z.max()))
        return _Run(low, high, hi, sizes)


class _VarintEncoder(_ValueEncoder):
    """int and long: zigzag varints."""

    def __init__(self, field: _Field, column: pa.Array) -> None:
        extremes = pc.min_max(column)
        self.lo, self.hi = _varint_sizes(extremes["min"].as_py(), extremes["max"].as_py())
        super().__init__(field, column, self.hi, self.lo == self.hi)

    def bound(self) -> int:
        return len(self.column) * (self.branch + self.hi)

    def pieces(self, lo: int, hi: int) -> list[_Piece]:
        chunk = self.column.slice(lo, hi - lo)
        valid = _validity(chunk)
        values = (chunk.fill_null(0) if valid is not None else chunk).to_numpy(zero_copy_only=False)
        return [self.run(valid, self.varints(values, self.lo, self.hi))]


def _value_matrix(field: _Field, column: pa.Array) -> np.ndarray:
    """Values of a fixed-width column (nulls as zeros) as an (n, width) uint8 matrix;
    decimals as Avro wants them: the low ``size`` bytes, big-endian."""
    t = column.type
    if pat.is_decimal(t) or pat.is_fixed_size_binary(t):
        filled = column.fill_null(pa.scalar(0, t) if pat.is_decimal(t) else b"\0" * t.byte_width)
        stride = 16 if pat.is_decimal(t) else t.byte_width
        data = np.frombuffer(filled.buffers()[1], np.uint8)
        matrix = data[filled.offset * stride : (filled.offset + len(filled)) * stride]
        matrix = matrix.reshape(-1, stride)
        return matrix[:, field.size - 1 :: -1] if pat.is_decimal(t) else matrix
    filled = column.fill_null(False if field.kind == "boolean" else 0)
    values = filled.to_numpy(zero_copy_only=False)
    values = values.astype(np.uint8) if field.kind == "boolean" else values
    return values.view(np.uint8).reshape(len(values), -1)


def _width(field: _Field) -> int:
    """Bytes of a fixed-width field's value."""
    return field.size if field.kind == "fixed" else _RAW_WIDTH[field.kind]


class _FixedEncoder(_ValueEncoder):
    """Fixed-width values of up to 11 bytes: boolean, float, double, small fixed."""

    def __init__(self, field: _Field, column: pa.Array) -> None:
        super().__init__(field, column, _width(field), True)

    def bound(self) -> int:
        return len(self.column) * self.shape[0].width

    def pieces(self, lo: int, hi: int) -> list[_Piece]:
        chunk = self.column.slice(lo, hi - lo)
        matrix = _value_matrix(self.field, chunk)
        if matrix.shape[1] == 8 and matrix.flags.c_contiguous:
            body = _Run(matrix.view(np.uint64)[:, 0], _ZERO, 8, 8)
        else:
            body = _Run.of_matrix(matrix, matrix.shape[1])
        return [self.run(_validity(chunk), body)]


class _WideEncoder(_Encoder):
    """Fixed-width values longer than a view holds: the views point into one matrix."""

    def __init__(self, field: _Field, column: pa.Array, buffers: _Buffers) -> None:
        _nulls(field, column)
        valid = _validity(column)
        body = _value_matrix(field, column)
        branch = 0 if field.value_byte is None else 1
        matrix = np.empty((len(body), branch + body.shape[1]), np.uint8)
        matrix[:, branch:] = body
        if branch:
            matrix[:, 0] = field.value_byte
        rows, width = matrix.shape
        offsets = pa.py_buffer(np.arange(rows + 1, dtype=np.int64) * width)
        encoded = pa.Array.from_buffers(pa.large_binary(), rows, [None, offsets, pa.py_buffer(matrix)])
        self.views = np.array(buffers.views(encoded))
        if valid is not None:  # a null row is its branch byte alone, inline
            self.views[~valid] = (1, field.null_byte, 0, 0)
        self.shape = (_Shape(True),)

    def bound(self) -> int:
        return int(self.views[:, 0].sum(dtype=np.int64))

    def pieces(self, lo: int, hi: int) -> list[_Piece]:
        return [_Views(self.views[lo:hi])]


class _StringEncoder(_ValueEncoder):
    """Strings and bytes: branch and length varint as a run, then the data as views."""

    def __init__(self, field: _Field, column: pa.Array, buffers: _Buffers) -> None:
        self.views, data = _views_of(column)  # casting the whole column is much the fastest
        self.base = buffers.add(data) if data else 0
        lengths = self.views[:, 0]
        self.data = int(lengths.sum(dtype=np.int64))
        lo, hi = (int(lengths.min()), int(lengths.max())) if len(lengths) else (None, None)
        self.lo, self.hi = _varint_sizes(lo, hi)
        super().__init__(field, column, self.hi, self.lo == self.hi)
        self.shape = (*self.shape, _Shape(True))

    def bound(self) -> int:
        return len(self.column) * (self.branch + self.hi) + self.data

    def pieces(self, lo: int, hi: int) -> list[_Piece]:
        valid = _validity(self.column.slice(lo, hi - lo))
        views = _rebased(self.views[lo:hi], self.base)
        if valid is not None:  # a null row has no data
            views = np.where(valid[:, None], views, 0).astype(np.int32)
        run = self.run(valid, self.varints(views[:, 0], self.lo, self.hi))
        return [run, _Views(views)]


def avro_long(value: int) -> bytes:
    """One Avro ``long`` (or ``int``): a zigzag varint."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _encode_value(field: _Field, value: bytes | None) -> bytes:
    """One string/bytes value of ``field`` fully encoded: branch, length, data."""
    if value is None:
        return bytes([field.null_byte])
    branch = b"" if field.value_byte is None else bytes([field.value_byte])
    return branch + avro_long(len(value)) + value


_SMALL_DICTIONARY = 4096  # dictionaries encoded value by value (larger ones are decoded)


class _DictionaryEncoder(_Encoder):
    """Dictionary-encoded strings: each distinct value encoded once, rows point at theirs."""

    def __init__(self, field: _Field, column: pa.DictionaryArray, buffers: _Buffers) -> None:
        values = column.dictionary.cast(pa.binary()).to_pylist()
        self.encoded = [_encode_value(field, v) for v in values]
        indices = column.indices
        if _nulls(field, column):
            indices = indices.fill_null(len(self.encoded))
            self.encoded.append(_encode_value(field, None))
        self.indices = indices.to_numpy(zero_copy_only=False)
        self.table = buffers.views(pa.array(self.encoded, pa.binary()))
        self.shape = (_Shape(True),)

    def bound(self) -> int:
        return len(self.indices) * max(map(len, self.encoded), default=0)

    def pieces(self, lo: int, hi: int) -> list[_Piece]:
        return [_Views(self.table[self.indices[lo:hi]])]


class _ConstantEncoder(_Encoder):
    """The same bytes in every row: a constant column, a missing (null) one, or several
    such fields in a row, merged."""

    def __init__(self, row: bytes, rows: int, buffers: _Buffers) -> None:
        self.row, self.rows = row, rows
        if len(row) <= _INLINE:
            self.shape = (_Shape(False, len(row), True, True),)
        else:
            self.view = buffers.views(pa.array([row], pa.binary()))
            self.shape = (_Shape(True, constant=True),)

    def bound(self) -> int:
        return self.rows * len(self.row)

    def then(self, following: _ConstantEncoder, buffers: _Buffers) -> _ConstantEncoder:
        return _ConstantEncoder(self.row + following.row, self.rows, buffers)

    def pieces(self, lo: int, hi: int) -> list[_Piece]:
        if self.shape[0].views:
            return [_Views(np.broadcast_to(self.view, (hi - lo, 4)))]
        return [_Run.constant(self.row)]


def _missing(field: _Field, rows: int, buffers: _Buffers) -> _ConstantEncoder:
    """A field the table lacks: null in every row."""
    if field.null_bytes is None:
        raise SchemaMismatchError(f"column {field.name!r} is missing and its Avro field is not nullable")
    return _ConstantEncoder(field.null_bytes, rows, buffers)


def _for_fastavro(t: pa.DataType) -> pa.DataType:
    """``t`` with every timestamp as UTC microseconds (exact for fastavro, any zone)."""
    if pat.is_timestamp(t):
        return pa.timestamp("us", "UTC")
    if pat.is_struct(t):
        return pa.struct([f.with_type(_for_fastavro(f.type)) for f in t])
    if pat.is_list(t) or pat.is_large_list(t):
        item = t.value_field.with_type(_for_fastavro(t.value_type))
        return pa.list_(item) if pat.is_list(t) else pa.large_list(item)
    if pat.is_map(t):
        return pa.map_(t.key_type, t.item_field.with_type(_for_fastavro(t.item_type)))
    if pat.is_dictionary(t):
        return _for_fastavro(t.value_type)
    return t


def _python_value(value: Any, t: pa.DataType) -> Any:
    """An Arrow Python value as fastavro writes it (maps as dicts)."""
    if value is None:
        return None
    if pat.is_struct(t):
        return {f.name: _python_value(value[f.name], f.type) for f in t}
    if pat.is_list(t) or pat.is_large_list(t):
        return [_python_value(v, t.value_type) for v in value]
    if pat.is_map(t):
        entries = {k: _python_value(v, t.item_type) for k, v in value}
        if len(entries) < len(value):
            raise ValueError(f"a map holds a key twice ({[k for k, _ in value]}); Avro maps cannot")
        return entries
    return value


class _NestedEncoder(_Encoder):
    """Anything else, through fastavro one row at a time (union branch included)."""

    def __init__(self, field: _Field, column: pa.Array, buffers: _Buffers) -> None:
        out = io.BytesIO()
        ends = [0]
        try:
            column = column.cast(_for_fastavro(column.type), safe=False)
            for value in column.to_pylist():
                fastavro.schemaless_writer(out, field.avro, _python_value(value, column.type))
                ends.append(out.tell())
        except (pa.ArrowException, ValueError, TypeError, KeyError, AttributeError) as e:
            raise _mismatch(field, column.type, e) from e
        encoded = pa.Array.from_buffers(
            pa.large_binary(),
            len(column),
            [None, pa.py_buffer(np.array(ends, np.int64)), pa.py_buffer(out.getvalue())],
        )
        self.views = buffers.views(encoded)
        self.size = ends[-1]
        self.shape = (_Shape(True),)

    def bound(self) -> int:
        return self.size

    def pieces(self, lo: int, hi: int) -> list[_Piece]:
        return [_Views(self.views[lo:hi])]


def _encoder(field: _Field, table: pa.Table, buffers: _Buffers) -> _Encoder:
    if field.name not in table.column_names:
        return _missing(field, table.num_rows, buffers)
    column = table.column(field.name).combine_chunks()
    if field.kind == "nested":
        return _NestedEncoder(field, column, buffers)
    column = _physical(field, column)
    if pat.is_dictionary(column.type):
        values = column.dictionary
        if len(values) == 1 and not column.null_count:
            (value,) = values.cast(pa.binary()).to_pylist()
            return _ConstantEncoder(_encode_value(field, value), len(column), buffers)
        if len(values) <= _SMALL_DICTIONARY:
            return _DictionaryEncoder(field, column, buffers)
        column = column.dictionary_decode()
    if field.kind in ("int", "long"):
        return _VarintEncoder(field, column)
    if field.kind in ("string", "bytes"):
        return _StringEncoder(field, column, buffers)
    if (field.value_byte is not None) + _width(field) > _INLINE:
        return _WideEncoder(field, column, buffers)
    return _FixedEncoder(field, column)


def _encoders(table: pa.Table, avro_schema: dict, buffers: _Buffers) -> list[_Encoder]:
    """One encoder per field, consecutive constant fields merged into one."""
    encoders: list[_Encoder] = []
    for field in _plan(_parse(avro_schema)):
        encoder = _encoder(field, table, buffers)
        previous = encoders[-1] if encoders else None
        if isinstance(encoder, _ConstantEncoder) and isinstance(previous, _ConstantEncoder):
            encoders[-1] = previous.then(encoder, buffers)
        else:
            encoders.append(encoder)
    return encoders
