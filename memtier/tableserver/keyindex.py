"""Finding the rows of given record keys among a block's frames in one vectorized pass,
not one pass per frame.

A key-filtered read (``lookup``, ``=``/``in`` on the key) asks a table server for the
rows of a few keys. Frames of random keys span the whole key range, so their min/max
rule nothing out, and a pass over every frame (~20 us each in Python) made such a read
grow with the writes held unflushed. A :class:`KeyIndex` keeps, per key column asked,
the values of the block's frames in frame order as one array (integer columns as
numpy, others as Arrow), extended by the frames added since the last read: the write
path never pays for it, and a read compares the whole block at once (~0.2 ns a row for
integers). The index holds a copy of the key columns (8 bytes a row for an int64 key)
beside the block's frames; it is dropped with them when the block is evicted.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

__all__ = ["KeyIndex"]

#: Up to this many values a read compares one value at a time (faster than a set).
_EQUALITIES = 8
#: Arrays a column keeps before merging them into one.
_TAIL = 16


class _Column:
    """One column's values over the first ``frames`` frames, in order, as a few arrays
    (the tail of recent frames merged into one once it grows past :data:`_TAIL`);
    ``ends[i]``: the row count after frame ``i``."""

    def __init__(self, kind: pa.DataType) -> None:
        self.numeric = pat.is_integer(kind)
        self.kind = kind
        self.frames = 0
        self.ends: list[int] = []
        self.parts: list[np.ndarray | pa.Array] = []

    def extend(self, arrays: Sequence[pa.Array]) -> None:
        """Append the column of the frames added since (one array each)."""
        total = self.ends[-1] if self.ends else 0
        for array in arrays:
            total += len(array)
            self.ends.append(total)
            self.parts.append(array.to_numpy(zero_copy_only=False) if self.numeric else array.cast(self.kind))
        self.frames += len(arrays)
        if len(self.parts) > _TAIL:
            self.parts = [np.concatenate(self.parts) if self.numeric else pa.concat_arrays(self.parts)]

    def mask(self, values: list[Any]) -> np.ndarray | None:
        """Rows holding one of ``values``; None when a value does not fit the column."""
        try:
            wanted = pa.array(values, self.kind)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return None
        if not self.parts:
            return np.zeros(0, dtype=bool)
        if not self.numeric:
            try:
                return np.concatenate([
                    pc.fill_null(pc.is_in(part, value_set=wanted), False).to_numpy(zero_copy_only=False)
                    for part in self.parts
                ])
            except pa.ArrowException:  # a type is_in does not take
                return None
        numbers = wanted.to_numpy(zero_copy_only=False)
        return np.concatenate([_equal_any(part, numbers) for part in self.parts])


def _equal_any(values: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """Where ``values`` holds one of ``numbers``."""
    if len(numbers) > _EQUALITIES:
        return np.isin(values, numbers)
    mask = np.zeros(len(values), dtype=bool)
    for number in numbers.tolist():
        mask |= values == number
    return mask


class KeyIndex:
    """The rows of a block's frames holding given values, found without a pass per
    frame; thread-safe. ``frames`` passed to :meth:`rows` must be the block's frames in
    order (a frame, once added, keeps its position)."""

    def __init__(self, schema: pa.Schema) -> None:
        self._schema = schema
        self._columns: dict[str, _Column] = {}
        self._lock = threading.Lock()

    def rows(self, frames: Sequence[Any], pinned: Mapping[str, list[Any]]) -> dict[int, np.ndarray] | None:
        """Frame position -> the rows of that frame holding a pinned value in every
        pinned column (frames without such rows left out); None when a value does not
        fit its column's type (the caller filters the frames instead)."""
        mask: np.ndarray | None = None
        ends: list[int] = []
        with self._lock:
            for name, values in pinned.items():
                column = self._columns.get(name)
                if column is None:
                    column = self._columns[name] = _Column(self._schema.field(name).type)
                column.extend([f.batch.column(name) for f in frames[column.frames:]])
                found = column.mask(values)
                if found is None:
                    return None
                ends = column.ends[:len(frames)]  # a concurrent read may have indexed more
                found = found[:ends[-1] if ends else 0]
                mask = found if mask is None else mask & found
        if mask is None:
            return None
        hits = np.flatnonzero(mask)
        if not len(hits):
            return {}
        positions = np.searchsorted(np.asarray(ends), hits, side="right")
        starts = np.r_[0, np.asarray(ends)[:-1]]
        found_rows: dict[int, np.ndarray] = {}
        cuts = np.flatnonzero(np.r_[True, positions[1:] != positions[:-1]])
        for begin, end in zip(cuts, np.r_[cuts[1:], len(hits)], strict=True):
            position = int(positions[begin])
            found_rows[position] = hits[begin:end] - starts[position]
        return found_rows
