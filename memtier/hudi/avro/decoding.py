"""Decoding datums into Arrow columns: a cursor per row advanced field by field in
lockstep; strings gathered by one ``take``; nested types through fastavro."""

from __future__ import annotations

import io

import fastavro
import numpy as np
import pyarrow as pa

from memtier.errors import CorruptFileError, InvalidArgumentError, SchemaMismatchError
from memtier.hudi.avro.encoders import _width
from memtier.hudi.avro.frames import _frame_starts
from memtier.hudi.avro.plans import _Field, _plan
from memtier.hudi.avro.schemas import _parse, avro_to_arrow_schema
from memtier.hudi.avro.source import _Source
from memtier.hudi.avro.varints import _HIGH1, _read_varints, _unzigzag

_DECODE_ROWS = 1 << 16  # records decoded together (numpy call overhead dominates below)


_LAST_BYTE_CONT = np.uint64(0x80 << 56)


class _Cursor:
    """The read positions of a range of records.

    Positions are checked against the records' ends where they decide what is read from
    the buffer (string lengths) and once at the end: a record that is too short or too
    long fails there. Reads before that are harmless; one off the buffer raises IndexError.
    """

    def __init__(self, source: _Source, starts: np.ndarray, ends: np.ndarray, where: str) -> None:
        self.source = source
        self.pos = starts.copy()
        self.ends = ends
        self.where = where
        self.near_end = len(ends) > 0 and int(ends[-1]) + 8 > source.size

    def fail(self, rows: np.ndarray, field: str, reason: str) -> CorruptFileError:
        row = int(np.flatnonzero(rows)[0])
        return CorruptFileError(self.where, int(self.pos[row]), f"field {field!r}: {reason}")

    def word(self, pos: np.ndarray | None = None) -> np.ndarray:
        return self.source.word(self.pos if pos is None else pos, self.near_end)

    def branch(self, field: _Field) -> tuple[np.ndarray | None, np.ndarray]:
        """Reads the union branch (if any). Returns the validity (None when no row is null)
        and the 8 bytes read at each row's position, the branch included."""
        word = self.word()
        if field.value_byte is None:
            return None, word
        branch = word & np.uint64(0xFF)
        valid = branch == field.value_byte
        all_valid = bool(valid.all())
        if not all_valid:
            bad = ~valid & (branch != (-1 if field.null_byte is None else field.null_byte))
            if bad.any():
                raise self.fail(bad, field.name, f"bad union branch byte {int(branch[bad][0])}")
        self.pos += 1
        return (None if all_valid else valid), word

    @staticmethod
    def after_branch(field: _Field, word: np.ndarray) -> np.ndarray:
        """The bytes of ``word`` after the branch; the missing last byte reads as a
        continuation byte, so no varint ends inside it."""
        if field.value_byte is None:
            return word
        return (word >> np.uint64(8)) | _LAST_BYTE_CONT

    def varints(self, field: str, valid: np.ndarray | None, word: np.ndarray) -> np.ndarray:
        """One varint per row that has a value (0 for the others), starting in ``word``."""
        if not (word & np.uint64(0x81)).any():  # one byte, >= 0: lengths, small counts
            values = ((word & np.uint64(0x7F)) >> np.uint64(1)).view(np.int64)
            if valid is None:
                self.pos += 1
                return values
            values[~valid] = 0
            self.pos += valid
            return values
        if not (word & np.uint64(0x80)).any():  # one byte
            values = _unzigzag(word & np.uint64(0x7F))
            if valid is None:
                self.pos += 1
                return values
            values[~valid] = 0
            self.pos += valid
            return values
        if not (~word & _HIGH1).all():  # some varint does not end in these bytes
            word = self.word()  # the 8 bytes at each row's position: most varints fit
        values, sizes = _read_varints(word)
        if valid is not None:
            values[~valid] = 0
            sizes[~valid] = 0
        longer = sizes == 0 if valid is None else (sizes == 0) & valid
        if longer.any():  # longer than what was read: read 8 bytes at the row's position
            rows = np.flatnonzero(longer)
            more, more_sizes = _read_varints(self.word(self.pos[rows]))
            values[rows], sizes[rows] = more, more_sizes
            for i in rows[more_sizes == 0]:  # 9 or 10 bytes: rare, the slow way
                values[i], sizes[i] = self._long_varint(int(self.pos[i]), field)
        self.pos += sizes
        return values

    def skip(self, lengths: np.ndarray, field: str) -> np.ndarray:
        """Moves past ``lengths`` bytes, which must lie inside each record; returns where
        they start."""
        starts = self.pos.copy()
        bad = lengths.view(np.uint64) > (self.ends - starts).view(np.uint64)  # or negative
        if bad.any():
            raise self.fail(bad, field, "length runs past the end of its record")
        self.pos += lengths
        return starts

    def _long_varint(self, at: int, field: str) -> tuple[int, int]:
        """A varint of more than 8 bytes, the slow way."""
        z = 0
        for size in range(1, 11):
            byte = int(self.source.u8[at + size - 1]) if at + size - 1 < self.source.size else 0
            z |= (byte & 0x7F) << (7 * (size - 1))
            if not byte & 0x80:
                return (z >> 1) ^ -(z & 1), size
        raise CorruptFileError(self.where, at, f"field {field!r}: varint longer than 10 bytes")


def _validity_buffer(valid: np.ndarray | None) -> pa.Buffer | None:
    return None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))


_ODD = np.arange(1, 2 * _DECODE_ROWS, 2, dtype=np.int32)


def _string_array(
    cursor: _Cursor, starts: np.ndarray, lengths: np.ndarray, valid: np.ndarray | None, kind: str
) -> pa.Array:
    """Slices of the source buffer as a string or binary array, copied by Arrow in C++.

    The slices and the gaps between them form a binary array over the source buffer (no
    copy: records are in order); its odd elements are the values. Strings are checked to
    be UTF-8 (at once when every byte is ASCII).
    """
    rows, source = len(starts), cursor.source
    large = source.size >= 2**31
    bounds = np.empty(2 * rows + 1, np.int64 if large else np.int32)
    bounds[0] = starts[0] if rows else 0
    bounds[1::2] = starts
    bounds[2::2] = starts + lengths
    binary = pa.large_binary() if large else pa.binary()
    pieces = pa.Array.from_buffers(binary, 2 * rows, [None, pa.py_buffer(bounds), source.buffer])
    values = pieces.take(_ODD[:rows])
    if valid is not None:
        validity = _validity_buffer(valid)
        values = pa.Array.from_buffers(binary, rows, [validity, *values.buffers()[1:]])
    if kind == "bytes":
        return values.cast(pa.binary()) if large else values
    text = pa.large_string() if large else pa.string()
    if _ascii(values.buffers()[2]):
        return values.view(text)
    try:
        return values.cast(text)
    except pa.ArrowInvalid as e:
        raise CorruptFileError(
            cursor.where, int(starts[0]), f"a string in the records from here on: {e}"
        ) from e


def _ascii(data: pa.Buffer | None) -> bool:
    """Whether every byte of ``data`` is below 0x80 (read eight at a time)."""
    if data is None:
        return True
    raw = np.frombuffer(data, np.uint8)
    whole = len(raw) // 8 * 8
    high = (raw[:whole].view(np.uint64) & np.uint64(_HIGH1)).any()
    return not high and not (raw[whole:] & 0x80).any()


def _fixed_array(field: _Field, matrix: np.ndarray, valid: np.ndarray | None) -> pa.Array:
    rows, width = matrix.shape
    validity = _validity_buffer(valid)
    if field.logical != "decimal":
        return pa.Array.from_buffers(pa.binary(width), rows, [validity, pa.py_buffer(matrix)])
    little = np.zeros((rows, 16), np.uint8)
    if width:
        little[:, :width] = matrix[:, ::-1]
        little[:, width:] = np.where(matrix[:, :1] & 0x80, 0xFF, 0).astype(np.uint8)
    decimal = pa.decimal128(field.precision, field.scale)
    return pa.Array.from_buffers(decimal, rows, [validity, pa.py_buffer(little)])


_NUMPY = {"int": np.int32, "long": np.int64, "float": np.float32, "double": np.float64}


def _decode_field(field: _Field, cursor: _Cursor, want: bool) -> pa.Array | None:
    """Decodes one flat field for the cursor's rows (an array only if ``want``)."""
    valid, word = cursor.branch(field)
    mask = None if valid is None else ~valid
    if field.kind in ("int", "long"):
        values = cursor.varints(field.name, valid, cursor.after_branch(field, word))
        return pa.array(values.astype(_NUMPY[field.kind]), mask=mask) if want else None
    if field.kind in ("string", "bytes"):
        lengths = cursor.varints(field.name, valid, cursor.after_branch(field, word))
        starts = cursor.skip(lengths, field.name)
        return _string_array(cursor, starts, lengths, valid, field.kind) if want else None
    width = _width(field)
    if field.kind == "fixed":
        sizes = np.full(len(cursor.pos), width) if valid is None else valid * width
        starts = cursor.skip(sizes, field.name)
        if not want:
            return None
        if valid is None:
            return _fixed_array(field, cursor.source.rows(starts, width), None)
        matrix = np.zeros((len(starts), width), np.uint8)
        matrix[valid] = cursor.source.rows(starts[valid], width)
        return _fixed_array(field, matrix, valid)
    starts = cursor.pos.copy()  # null rows read harmless bytes of what follows
    cursor.pos += width if valid is None else valid * width
    if not want:
        return None
    if field.kind == "double":
        return pa.array(cursor.word(starts).view(np.float64), mask=mask)
    word = cursor.after_branch(field, word)  # float and boolean values sit in it
    if field.kind == "float":
        bits = (word & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        return pa.array(bits.view(np.float32), mask=mask)
    return pa.array((word & np.uint64(0xFF)).astype(bool), mask=mask)


def _decode_nested(field: _Field, cursor: _Cursor, stream: io.BytesIO, want: bool) -> list | None:
    """Decodes one field with fastavro, row by row."""
    values = []
    for i, at in enumerate(cursor.pos.tolist()):
        stream.seek(at)
        try:
            values.append(fastavro.schemaless_reader(stream, field.avro, None))
        except Exception as e:  # fastavro raises anything at all on garbage
            raise CorruptFileError(cursor.where, at, f"field {field.name!r}: {e}") from e
        cursor.pos[i] = stream.tell()
    return values if want else None


def _conform(array: pa.Array | list, natural: pa.DataType, target: pa.Field) -> pa.Array:
    """A decoded column in the type the caller asked for."""
    try:
        if isinstance(array, list):
            array = pa.array(array, type=natural)
        if array.type != natural:
            array = array.cast(natural)
        return array if array.type == target.type else array.cast(target.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise SchemaMismatchError(
            f"column {target.name!r}: Avro values of type {natural} do not fit {target.type}: {e}"
        ) from e


def _decode(
    reader: _Source,
    starts: np.ndarray,
    ends: np.ndarray,
    writer_schema: dict | str,
    arrow_schema: pa.Schema | None,
    where: str,
) -> pa.Table:
    """The records at ``[starts[i], ends[i])`` of the reader's buffer."""
    schema = _parse(writer_schema)
    fields = _plan(schema)
    natural = avro_to_arrow_schema(schema)
    target = arrow_schema if arrow_schema is not None else natural
    wanted = set(target.names)
    stream = io.BytesIO(reader.buffer) if any(f.kind == "nested" for f in fields) else None
    batches = []
    for lo in range(0, len(starts), _DECODE_ROWS):
        hi = min(len(starts), lo + _DECODE_ROWS)
        cursor = _Cursor(reader, starts[lo:hi], ends[lo:hi], where)
        decoded: dict[str, pa.Array | list | None] = {}
        try:
            for field in fields:
                want = field.name in wanted
                if field.kind == "nested":
                    decoded[field.name] = _decode_nested(field, cursor, stream, want)
                else:
                    decoded[field.name] = _decode_field(field, cursor, want)
        except IndexError as e:  # a corrupt record sent a read off the buffer
            raise CorruptFileError(where, int(starts[lo]), f"records do not decode: {e}") from e
        wrong = cursor.pos != cursor.ends
        if wrong.any():
            raise cursor.fail(wrong, fields[-1].name, "record length does not match its fields")
        columns = [
            _conform(decoded[f.name], natural.field(f.name).type, f)
            if decoded.get(f.name) is not None
            else pa.nulls(hi - lo, f.type)
            for f in target
        ]
        batches.append(pa.RecordBatch.from_arrays(columns, schema=target))
    return pa.Table.from_batches(batches, schema=target)


def decode_records(
    data: pa.Buffer | bytes | memoryview,
    offsets: np.ndarray,
    writer_schema: dict | str,
    arrow_schema: pa.Schema | None = None,
    *,
    source: str = "<avro records>",
) -> pa.Table:
    """The records at ``data[offsets[i]:offsets[i+1]]``, Avro datums of ``writer_schema``.

    ``arrow_schema`` fixes the result's columns and types: columns the writer lacks come
    back null, writer columns it lacks are dropped. ``source`` names the data in errors.
    """
    reader = _Source(data)
    offsets = np.asarray(offsets, np.int64)
    if len(offsets) == 0 or (np.diff(offsets) < 0).any():
        raise InvalidArgumentError("record offsets must be n + 1 non-decreasing positions")
    if offsets[0] < 0 or offsets[-1] > reader.size:
        raise InvalidArgumentError(
            f"record offsets {offsets[0]}..{offsets[-1]} exceed the {reader.size}-byte buffer"
        )
    return _decode(reader, offsets[:-1], offsets[1:], writer_schema, arrow_schema, source)


def decode_framed(
    data: pa.Buffer | bytes | memoryview,
    count: int,
    writer_schema: dict | str,
    arrow_schema: pa.Schema | None = None,
    *,
    source: str = "<avro records>",
) -> pa.Table:
    """The inverse of :func:`encode_framed`'s rows: ``data`` holds exactly ``count``
    records, each an int32 big-endian length and an Avro datum of ``writer_schema``."""
    reader = _Source(data)
    frames = _frame_starts(reader, count, source)
    starts = frames + 4
    ends = np.append(frames[1:], reader.size)
    return _decode(reader, starts, ends, writer_schema, arrow_schema, source)
