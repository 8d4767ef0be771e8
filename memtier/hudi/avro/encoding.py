"""Laying out the pieces of every row as binary views cast into one contiguous buffer:
schemaless datums (:func:`encode_records`) or length-framed ones (:func:`encode_framed`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from memtier.hudi.avro.encoders import _CHUNK_ROWS, _INLINE, _Buffers, _encoders, _Piece, _Run, _Shape, _Views
from memtier.hudi.avro.varints import _ZERO


def _groups(shapes: list[_Shape]) -> list[list[int]]:
    """Pieces written as one view each: runs fuse while they fit in a view, and only the
    last run of a group may vary in length."""
    groups: list[list[int]] = []
    width, extendable = 0, False
    for i, shape in enumerate(shapes):
        if shape.views:
            groups.append([i])
            extendable = False
        elif extendable and width + shape.width <= _INLINE:
            groups[-1].append(i)
            width, extendable = width + shape.width, shape.fixed
        else:
            groups.append([i])
            width, extendable = shape.width, shape.fixed
    return groups


def _put(target: np.ndarray, pieces: list[_Piece]) -> None:
    """One binary view per row for ``pieces`` into ``target`` ((rows, 4) int32)."""
    first = pieces[0]
    if isinstance(first, _Views):  # copying 16-byte items is fastest
        np.copyto(target.view("V16")[:, 0], first.views.view("V16")[:, 0])
        return
    run = first
    for piece in pieces[1:]:
        run = run.then(piece)
    words = target.view(np.uint64)
    words[:, 0] = (run.low << np.uint64(32)) | np.asarray(run.lengths).astype(np.uint64)
    if run.width <= 4:
        words[:, 1] = 0
    elif run.width <= 8:
        words[:, 1] = run.low >> np.uint64(32)
    else:
        words[:, 1] = (run.low >> np.uint64(32)) | (run.high << np.uint64(32))


def _lengths(piece: _Piece) -> np.ndarray | int:
    return piece.views[:, 0] if isinstance(piece, _Views) else piece.lengths


def _lay_out(
    table: pa.Table,
    avro_schema: dict,
    *,
    framed: bool,
    head: Callable[[int], bytes] = lambda size: b"",
    tail: Callable[[int], bytes] = lambda size: b"",
) -> tuple[pa.Buffer, np.ndarray]:
    """``head(n)``, every row's datum (framed: behind its int32 big-endian length), then
    ``tail(n)``, in one buffer, and each row's offset in it (n + 1). ``n`` is the size of
    all rows; the lengths of ``head(n)`` and ``tail(n)`` must not depend on it.

    Rows go in chunks: their pieces become binary views, one cast lays the chunk out
    contiguously, and the chunk is copied into place in the result.
    """
    buffers = _Buffers()
    encoders = _encoders(table, avro_schema, buffers)
    rows = table.num_rows
    shapes = [s for e in encoders for s in e.shape]
    if framed:
        shapes.insert(0, _Shape(False, 4, True))
    groups = _groups(shapes)
    constant = {j for j, group in enumerate(groups) if all(shapes[i].constant for i in group)}
    start, end = len(head(0)), len(tail(0))
    bound = start + sum(e.bound() for e in encoders) + 4 * rows * framed + end
    result = pa.allocate_buffer(bound)
    out = np.frombuffer(result, np.uint8)
    offsets = np.empty(rows + 1, np.int64)
    scratch = np.empty((min(rows, _CHUNK_ROWS) * len(groups), 4), np.int32)
    at = start
    for lo in range(0, rows, _CHUNK_ROWS):
        hi = min(rows, lo + _CHUNK_ROWS)
        pieces: list[_Piece] = [p for e in encoders for p in e.pieces(lo, hi)]
        if framed:
            sizes = sum((_lengths(p) for p in pieces), np.zeros(hi - lo, np.int64))
            frame = sizes.astype(">u4").view("<u4").astype(np.uint64)
            pieces.insert(0, _Run(frame, _ZERO, 4, 4))
        views = scratch[: (hi - lo) * len(groups)]
        for j, group in enumerate(groups):
            if lo == 0 or j not in constant:  # constant views stay from the first chunk
                _put(views[j :: len(groups)], [pieces[i] for i in group])
        array = pa.Array.from_buffers(
            pa.binary_view(), len(views), [None, pa.py_buffer(views), *buffers.all]
        ).cast(pa.binary())
        data, chunk_offsets = _data_and_offsets(array)
        out[at : at + len(data)] = np.frombuffer(data, np.uint8)
        offsets[lo:hi] = chunk_offsets[: -1 : len(groups)] + at
        at += len(data)
    offsets[rows] = at
    out[:start] = np.frombuffer(head(at - start), np.uint8)
    out[at : at + end] = np.frombuffer(tail(at - start), np.uint8)
    return result.slice(0, at + end), offsets


def _data_and_offsets(array: pa.Array) -> tuple[pa.Buffer, np.ndarray]:
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], np.int32)[: len(array) + 1]
    return buffers[2].slice(0, int(offsets[-1])), offsets


def encode_records(table: pa.Table, avro_schema: dict) -> tuple[pa.Buffer, np.ndarray]:
    """Each row of ``table`` as a schemaless Avro binary datum of ``avro_schema``,
    concatenated, and the datums' int64 offsets (n + 1). Columns are matched by name;
    a nullable field the table lacks is written null."""
    return _lay_out(table, avro_schema, framed=False)


def encode_framed(
    table: pa.Table,
    avro_schema: dict,
    head: Callable[[int], bytes],
    tail: Callable[[int], bytes],
) -> pa.Buffer:
    """``head(n)``, then each row as int32 big-endian length + Avro datum (``n`` bytes in
    all), then ``tail(n)``, in one buffer: Hudi's Avro block content is such a run of rows.
    The lengths of ``head(n)`` and ``tail(n)`` must not depend on ``n``."""
    return _lay_out(table, avro_schema, framed=True, head=head, tail=tail)[0]
