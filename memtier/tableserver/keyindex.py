"""Finding the rows of given record keys among a block's frames without a pass per frame,
and, for integer keys, without a pass over the block.

A key-filtered read (``lookup``, ``=``/``in`` on the key) asks a table server for the
rows of a few keys. Frames of random keys span the whole key range, so their min/max
rule nothing out, and a pass over every frame (~20 us each in Python) made such a read
grow with the writes held unflushed. A :class:`KeyIndex` keeps, per key column asked,
the values of the block's frames, extended by the frames added since the last read: the
write path never pays for it.

An integer column is kept as sorted runs, each a run of values with the block's row
numbers (12 bytes a row for an int64 key), and a tail of its newest rows in row order. A
read binary-searches each run and compares the tail whole; once :data:`_SCANS_BEFORE_SORT`
reads have compared the tail, it is sorted into a run (sorting costs ~100 passes over the
same rows: a block read that often pays it back, one read rarely never sorts), merged
with the runs before it that are at most twice its size, so a block of ``n`` rows has at
most ~log2(n) runs and a value is merged ~log2(n) times in all. A lookup in a block of a
million rows read continuously costs microseconds, where comparing the whole column cost
~0.5 ms. Other key types (strings) are kept as Arrow arrays in frame order and compared
whole (``is_in``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from memtier.hudi.keyread import equal_ranges

__all__ = ["KeyIndex"]

#: Arrays a column keeps (strings, or an integer column's tail) before merging them into one.
_TAIL = 16
#: Reads that compare an integer column's tail before it is sorted into a run.
_SCANS_BEFORE_SORT = 64
#: Up to this many values a read compares one value at a time (faster than a set).
_EQUALITIES = 8
#: The row numbers of a block, in a run (blocks hold far fewer than 2**31 rows).
_ROW = np.int32


def _sorted(values: np.ndarray, *, scratch: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Integer ``values`` sorted stably, and the position each came from (``_ROW``).
    Where their range leaves room, each value is packed with its position into one int64,
    those are sorted with numpy's vectorized sort and unpacked (~20 ns a value, where a
    stable argsort of random values and the gathers after it take ~150). ``scratch``:
    ``values`` may be overwritten (every fresh array costs its pages' faults too)."""
    n = len(values)
    shift = max(n - 1, 1).bit_length()
    low = int(values.min()) if n else 0
    if not n or int(values.max()) - low >= 1 << (63 - shift):
        order = np.argsort(values, kind="stable")
        return values[order], order.astype(_ROW)
    if values.dtype == np.uint64:
        packed = (values - np.uint64(low)).view(np.int64)
    else:
        packed = values if scratch and values.dtype == np.int64 else values.astype(np.int64)
        packed -= low
    packed <<= shift
    packed |= np.arange(n, dtype=np.int64)
    packed.sort()
    positions = np.bitwise_and(packed, (1 << shift) - 1, out=np.empty(n, _ROW), casting="unsafe")
    packed >>= shift
    if values.dtype == np.uint64:
        return packed.view(np.uint64) + np.uint64(low), positions
    packed += low
    return packed.astype(values.dtype, copy=False), positions


class _SortedRuns:
    """An integer column as sorted runs of (value, row number), and its newest rows in
    row order (the tail), compared whole until enough reads asked for them."""

    def __init__(self) -> None:
        self.runs: list[tuple[np.ndarray, np.ndarray]] = []
        self.tail: list[np.ndarray] = []
        self.tail_first = 0  # the row number of the tail's first row
        self.scans = 0  # reads that compared the tail

    def extend(self, parts: Sequence[np.ndarray]) -> None:
        """Add the values of the rows that follow the last (one array a frame)."""
        self.tail.extend(parts)
        if len(self.tail) > _TAIL:
            self.tail = [np.concatenate(self.tail)]

    def rows(self, numbers: np.ndarray) -> np.ndarray:
        """The row numbers holding one of ``numbers``, ascending (then the tail is sorted
        into a run if enough reads compared it)."""
        numbers = np.unique(numbers)  # a value asked twice: its rows once
        found = []
        for values, rows in self.runs:
            found.append(rows[equal_ranges(values, numbers)])
        first = self.tail_first
        for part in self.tail:
            found.append(np.flatnonzero(_equal_any(part, numbers)) + first)
            first += len(part)
        self.scans += 1
        if self.scans >= _SCANS_BEFORE_SORT:
            self.sort_tail()
        return np.sort(np.concatenate(found)) if found else np.zeros(0, _ROW)

    def sort_tail(self) -> None:
        """Make the tail a run."""
        self.scans = 0
        if not self.tail:
            return
        values = np.concatenate(self.tail)  # a fresh copy: sorted in place
        self.add_run(values, self.tail_first, scratch=True)
        self.tail, self.tail_first = [], self.tail_first + len(values)

    def add_run(self, values: np.ndarray, first_row: int, *, scratch: bool = False) -> None:
        """Add ``values``, the column of rows ``first_row``... in order, as one run, merged
        with the runs before it that are at most twice the size of what they would join
        (``scratch``: ``values`` may be overwritten)."""
        ordered, rows = _sorted(values, scratch=scratch)
        rows += first_row
        first, size = len(self.runs), len(values)
        while first > 0 and len(self.runs[first - 1][0]) <= 2 * size:
            first -= 1
            size += len(self.runs[first][0])
        if first == len(self.runs):
            self.runs.append((ordered, rows))
            return
        merging = [*self.runs[first:], (ordered, rows)]
        merged, positions = _sorted(np.concatenate([v for v, _ in merging]), scratch=True)
        self.runs[first:] = [(merged, np.concatenate([r for _, r in merging])[positions])]


def _equal_any(values: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """Where ``values`` holds one of ``numbers``."""
    if len(numbers) > _EQUALITIES:
        return np.isin(values, numbers)
    mask = np.zeros(len(values), dtype=bool)
    for number in numbers:
        mask |= values == number
    return mask


def _integers(values: list[Any], dtype: type[np.integer]) -> np.ndarray | None:
    """``values`` (nulls left out) as an array of ``dtype``; None when one is not an
    integer of its range. Plain Python: a lookup's value or two, per block it reads."""
    limits = np.iinfo(dtype)
    kept = [v for v in values if v is not None]
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and limits.min <= v <= limits.max
               for v in kept):
        return None
    return np.array(kept, dtype=dtype)


class _Column:
    """One column's values over the first ``frames`` frames; ``ends[i]``: the row count
    after frame ``i``."""

    def __init__(self, kind: pa.DataType) -> None:
        self.numeric = pat.is_integer(kind)
        self.kind = kind
        self.frames = 0
        self.ends = np.zeros(0, np.int64)
        self.sorted = _SortedRuns()
        self.parts: list[pa.Array] = []  # the values in frame order (other types)

    def extend(self, arrays: Sequence[pa.Array]) -> None:
        """Append the column of the frames added since (one array each)."""
        if not arrays:
            return
        first = int(self.ends[-1]) if len(self.ends) else 0
        self.ends = np.concatenate([self.ends, first + np.cumsum([len(a) for a in arrays])])
        self.frames += len(arrays)
        if self.numeric:
            self.sorted.extend([a.to_numpy(zero_copy_only=False) for a in arrays])
            return
        self.parts.extend(a.cast(self.kind) for a in arrays)
        if len(self.parts) > _TAIL:
            self.parts = [pa.concat_arrays(self.parts)]

    def rows(self, values: list[Any]) -> np.ndarray | None:
        """The rows holding one of ``values``, ascending; None when a value does not fit
        the column."""
        if self.numeric:
            numbers = _integers(values, self.kind.to_pandas_dtype())
            return None if numbers is None else self.sorted.rows(numbers)
        try:
            wanted = pa.array(values, self.kind)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return None
        if not self.parts:
            return np.zeros(0, _ROW)
        try:
            masks = [pc.fill_null(pc.is_in(part, value_set=wanted), False).to_numpy(zero_copy_only=False)
                     for part in self.parts]
        except pa.ArrowException:  # a type is_in does not take
            return None
        return np.flatnonzero(np.concatenate(masks))


class KeyIndex:
    """The rows of a block's frames holding given values, found without a pass per
    frame; thread-safe. ``frames`` passed to :meth:`rows` must be the block's frames in
    order (a frame, once added, keeps its position)."""

    def __init__(self, schema: pa.Schema) -> None:
        self._schema = schema
        self._columns: dict[str, _Column] = {}
        self._lock = threading.Lock()

    def rows(self, frames: Sequence[Any], count: int,
             pinned: Mapping[str, list[Any]]) -> dict[int, np.ndarray] | None:
        """Frame position -> the rows of that frame holding a pinned value in every
        pinned column (frames without such rows left out), among the first ``count`` of
        ``frames``; None when a value does not fit its column's type (the caller filters
        the frames instead)."""
        hits: np.ndarray | None = None
        ends = np.zeros(0, np.int64)
        with self._lock:
            for name, values in pinned.items():
                column = self._columns.get(name)
                if column is None:
                    column = self._columns[name] = _Column(self._schema.field(name).type)
                column.extend([frames[i].column(name) for i in range(column.frames, count)])
                found = column.rows(values)
                if found is None:
                    return None
                hits = found if hits is None else np.intersect1d(hits, found, assume_unique=True)
                ends = column.ends[:count]  # a concurrent read may have indexed more frames
        if hits is None:
            return None
        hits = hits[hits < ends[-1]] if len(ends) else hits[:0]
        if not len(hits):
            return {}
        positions = np.searchsorted(ends, hits, side="right")
        starts = np.r_[0, ends[:-1]]
        found_rows: dict[int, np.ndarray] = {}
        cuts = np.flatnonzero(np.r_[True, positions[1:] != positions[:-1]])
        for begin, end in zip(cuts, np.r_[cuts[1:], len(hits)], strict=True):
            position = int(positions[begin])
            found_rows[position] = (hits[begin:end] - starts[position]).astype(np.int64)
        return found_rows
