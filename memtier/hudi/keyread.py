"""Reading only the rows of given record keys from a base file, so a lookup costs about
the same at any table size.

A read filtered on the record key (``=`` / ``in`` on key columns, as ``Client.lookup``
sends) asks a base file for a few keys. Base files are immutable, so the reading
process keeps facts about them in its :class:`~memtier.hudi.cache.SliceCache`:

1. the Parquet footer (row-group statistics), read once per file;
2. row groups whose key-column min/max cannot hold any wanted key are skipped (memtier
   writes base files sorted by the record key, in row groups of
   :data:`~memtier.hudi.parquetfile.ROW_GROUP_ROWS` rows: a single key column in its
   own order, integer or string, and a composite key by its columns in turn, so the
   leading key column's ranges do not overlap and one row group remains);
3. the key columns of each remaining row group, read once and kept, with the columns
   whose values are in order noted: the exact rows of the wanted keys are found there
   by binary search on such a column (a handful of comparisons), else by comparing the
   whole column (files written by other writers need not be sorted); a row group
   without them is skipped, which is how a key given without its partition skips the
   partitions that do not hold it;
4. only the row groups holding a wanted key are decoded, and only those rows kept.

Log files are decoded whole and kept (by path and size: a log file only grows); a key
read keeps a :class:`LogKeys` index of each block's key columns beside them, so it finds
a key's rows in a block by binary search, not by a pass over every row of every log file.

The result is what filtering the whole file on the key filters gives, so the merge that
follows sees exactly the rows it would have seen.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyarrow.types as pat

from memtier.hudi.basefile import key_order
from memtier.hudi.filters import Filter, pinned_values, to_expression
from memtier.hudi.keyfilter import KeyBloom, footer_filters, hashes_of
from memtier.io import FileIO

if TYPE_CHECKING:
    from memtier.hudi.cache import SliceCache

__all__ = ["GroupKeys", "KeyFilter", "LogKeys", "equal_ranges", "read_key_rows"]


@dataclass(frozen=True)
class KeyFilter:
    """Filters on record-key columns (safe to apply before the merge): the expression,
    and the values ``=`` / ``in`` pin, by column (what row groups are pruned on)."""

    filters: tuple[Filter, ...]
    expression: pc.Expression
    pinned: Mapping[str, list[Any]]
    #: (column, type) -> the pinned values searchable in such a column (None: they do not
    #: fit it), made once per read rather than once per row group or log block
    _searched: dict[tuple[str, pa.DataType], np.ndarray | list[str] | None] = field(
        default_factory=dict, compare=False, repr=False)
    #: (column, type) -> the pinned values' Bloom hashes (None: they do not fit it), made
    #: once per read rather than once per file or log block probed
    _hashed: dict[tuple[str, pa.DataType], np.ndarray | None] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, filters: Sequence[Filter]) -> KeyFilter | None:
        """The filters (already restricted to key columns) as one; None when there are none."""
        expression = to_expression(filters)
        if expression is None:
            return None
        return cls(tuple(filters), expression, pinned_values(filters))

    @property
    def columns(self) -> list[str]:
        """The columns the filters name."""
        return list(dict.fromkeys(f[0] for f in self.filters))

    def may_be_in(self, blooms: Mapping[str, KeyBloom], schema: pa.Schema) -> bool:
        """False only when a pinned column's Bloom filter holds none of its values."""
        for column, values in self.pinned.items():
            bloom = blooms.get(column)
            if bloom is None or column not in schema.names:
                continue
            kind = schema.field(column).type
            hashed = self._hashed.get((column, kind), False)
            if hashed is False:
                try:
                    hashed = self._hashed[(column, kind)] = hashes_of(pa.array(values, kind))
                except (pa.ArrowException, TypeError, ValueError, OverflowError):
                    hashed = self._hashed[(column, kind)] = None  # values that do not fit: the expression decides
            if hashed is not None and not bloom.may_hold_hashed(hashed):
                return False
        return True

    def rows(self, table: pa.Table) -> np.ndarray:
        """Indices of the rows of ``table`` (holding :attr:`columns`) that pass."""
        mask = self._pinned_mask(table) if len(self.pinned) == len(self.filters) else None
        if mask is None:
            numbered = table.select(self.columns).append_column(
                "__row", pa.array(np.arange(table.num_rows, dtype=np.int64)))
            return numbered.filter(self.expression).column("__row").to_numpy()
        return np.flatnonzero(mask)

    def rows_in(self, group: GroupKeys) -> np.ndarray:
        """:meth:`rows` of a row group's key columns, by binary search on a pinned
        column whose values are in order (when every filter pins values)."""
        if len(self.pinned) == len(self.filters):
            for column, values in self.pinned.items():
                ordered = group.ordered.get(column)
                if ordered is None:
                    continue
                kind = group.table.column(column).type
                wanted = self._searched.get((column, kind), False)
                if wanted is False:
                    wanted = self._searched[(column, kind)] = _searchable(values, kind)
                if wanted is None:
                    break
                candidates = equal_ranges(ordered, wanted)
                if len(self.pinned) == 1 or not len(candidates):
                    return candidates
                mask = self._pinned_mask(group.table.take(pa.array(candidates)))
                if mask is None:
                    break
                return candidates[mask]
        return self.rows(group.table)

    def filter(self, table: pa.Table) -> pa.Table:
        """``table`` reduced to the rows that pass (order kept)."""
        rows = self.rows(table)
        return table if len(rows) == table.num_rows else table.take(pa.array(rows))

    def _pinned_mask(self, table: pa.Table) -> np.ndarray | None:
        """The rows whose every filtered column holds a pinned value (one filter per
        column, each ``=`` or ``in``); None when a value does not fit its column's type
        (the expression then decides, as it would have)."""
        mask = np.ones(table.num_rows, dtype=bool)
        for column, values in self.pinned.items():
            data = table.column(column)
            try:
                value_set = pa.array(values, data.type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                return None
            mask &= pc.fill_null(pc.is_in(data, value_set=value_set), False).to_numpy(zero_copy_only=False)
        return mask


def read_key_rows(
    io: FileIO, path: str, columns: Sequence[str], keys: KeyFilter, cache: SliceCache
) -> pa.Table | None:
    """The rows of the base file at ``path`` that pass ``keys``, with those of
    ``columns`` the file has, or None when the file lacks a filtered column (the caller
    reads it whole). The file is opened only for what the cache does not hold yet and
    for the row groups holding a wanted key."""
    footer, leaves, arrow_schema, bounds, constant, blooms = cache.get(("footer", path), lambda: _footer(io, path))
    if any(c not in leaves for c in keys.columns):
        return None
    present = [c for c in columns if c in leaves]
    if not keys.may_be_in(blooms, arrow_schema):
        return pa.schema([arrow_schema.field(c) for c in present]).empty_table()
    pieces = []
    with contextlib.ExitStack() as files:
        opened: list[pq.ParquetFile] = []

        def parquet() -> pq.ParquetFile:
            if not opened:  # constant strings (a partition column) decode as a dictionary: ~30x cheaper
                source = files.enter_context(io.open_input(path))
                dictionaries = [c for c in constant if c not in keys.columns]
                opened.append(pq.ParquetFile(source, metadata=footer, read_dictionary=dictionaries))
            return opened[0]

        for group in range(footer.num_row_groups):
            if not _may_hold(group, bounds, keys.pinned):
                continue
            key_table = cache.get(("keys", path, group, tuple(keys.columns)),
                                  lambda g=group: GroupKeys.of(parquet().read_row_group(g, columns=keys.columns)))
            rows = keys.rows_in(key_table)
            if len(rows):
                # one thread: a row group's few columns decode in ~1 ms, and handing them to
                # Arrow's pool made the p99 of a loaded 2-core machine's lookups 1.5x
                group_rows = parquet().read_row_group(group, columns=present, use_threads=False)
                pieces.append(group_rows.take(pa.array(rows)))
    if not pieces:
        return pa.schema([arrow_schema.field(c) for c in present]).empty_table()
    return pa.concat_tables(pieces)


def warm_footers(io: FileIO, paths: Iterable[str], cache: SliceCache) -> None:
    """Read the footers (key statistics, key filters) of the base files at ``paths`` into
    ``cache`` in the background: a read of a few keys then opens none on first touch."""
    cache.warm([(("footer", path), functools.partial(_footer, io, path)) for path in paths])


@dataclass(frozen=True)
class GroupKeys:
    """One row group's key columns, and those of them whose values never decrease
    (integers as numpy, strings as Arrow): where a key's rows are found by binary search."""

    table: pa.Table
    ordered: Mapping[str, np.ndarray | pa.Array]

    @classmethod
    def of(cls, table: pa.Table) -> GroupKeys:
        ordered: dict[str, np.ndarray | pa.Array] = {}
        for name in table.column_names:
            column = table.column(name).combine_chunks()
            if column.null_count or len(column) < 2:
                continue
            if pat.is_integer(column.type):
                values = column.to_numpy()
                if bool(np.all(values[1:] >= values[:-1])):
                    ordered[name] = values
            elif pat.is_string(column.type) or pat.is_large_string(column.type):
                if pc.all(pc.less_equal(column.slice(0, len(column) - 1), column.slice(1))).as_py():
                    ordered[name] = column
        return cls(table, ordered)

    @property
    def nbytes(self) -> int:
        return self.table.nbytes  # ordered columns share the table's buffers


@dataclass(frozen=True)
class LogKeys:
    """A key index of one decoded log block: its key columns sorted (``keys``) and the
    block's row of each sorted row (``order``; None when the block is in order), so a
    read of a few keys binary-searches the block instead of comparing every row."""

    keys: GroupKeys
    order: np.ndarray | None

    @classmethod
    def of(cls, table: pa.Table) -> LogKeys:
        """The index of ``table`` (the block's key columns)."""
        order = key_order(table) if table.num_rows > 1 else None
        return cls(GroupKeys.of(table if order is None else table.take(pa.array(order))), order)

    def rows(self, keys: KeyFilter) -> np.ndarray:
        """The block's rows passing ``keys``, in block order."""
        found = keys.rows_in(self.keys)
        return found if self.order is None else np.sort(self.order[found])

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + (self.order.nbytes if self.order is not None else 0)


def _searchable(values: Sequence[Any], kind: pa.DataType) -> np.ndarray | list[str] | None:
    """``values`` as :func:`equal_ranges` searches a column of type ``kind`` for them
    (integers: sorted unique numpy; strings: a sorted list); None when they do not fit."""
    if pat.is_integer(kind):
        try:
            return np.unique(pa.array(values, kind).to_numpy(zero_copy_only=False))
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return None
    if all(isinstance(v, str) for v in values):
        return sorted(set(values))
    return None


def equal_ranges(ordered: np.ndarray | pa.Array, wanted: np.ndarray | list[str]) -> np.ndarray:
    """The rows of a non-decreasing column holding one of the ``wanted`` values, in order."""
    if isinstance(ordered, np.ndarray):
        starts = np.searchsorted(ordered, wanted, side="left")
        ends = np.searchsorted(ordered, wanted, side="right")
    else:
        starts = np.array([_bisect(ordered, v, right=False) for v in wanted], dtype=np.int64)
        ends = np.array([_bisect(ordered, v, right=True) for v in wanted], dtype=np.int64)
    hits = [(a, b) for a, b in zip(starts.tolist(), ends.tolist(), strict=True) if b > a]
    if not hits:
        return np.zeros(0, dtype=np.int64)
    if len(hits) == 1:
        return np.arange(hits[0][0], hits[0][1], dtype=np.int64)
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in hits])


def _bisect(ordered: pa.Array, value: str, *, right: bool) -> int:
    """Where ``value`` goes in a non-decreasing string array (before equal values, or
    after them with ``right``): about 14 comparisons in a row group of 16,384 rows."""
    low, high = 0, len(ordered)
    while low < high:
        middle = (low + high) // 2
        found = ordered[middle].as_py()
        if found < value or (right and found == value):
            low = middle + 1
        else:
            high = middle
    return low


#: Per prunable column, each row group's (min, max); None where a group has no statistics,
#: :data:`_EMPTY` where it has no rows (a compaction that deleted every row writes one).
_Bounds = dict[str, list[tuple[Any, ...] | None]]
_EMPTY: tuple[Any, ...] = ()


def _footer(
    io: FileIO, path: str
) -> tuple[pq.FileMetaData, dict[str, int], pa.Schema, _Bounds, list[str], dict[str, KeyBloom]]:
    """A file's footer, its column indices by name, its Arrow schema, the key-range
    statistics of its integer and string columns (read once: a lookup then prunes row
    groups without touching pyarrow's metadata objects), its string columns that hold
    one value in every row group and its key columns' Bloom filters."""
    with io.open_input(path) as source:
        footer = pq.read_metadata(source)
    leaves = {name: i for i, name in enumerate(footer.schema.names)}
    schema = footer.schema.to_arrow_schema()
    bounds: _Bounds = {}
    for name, leaf in leaves.items():
        kind = schema.field(name).type if name in schema.names else None
        if kind is None or not (pat.is_integer(kind) or pat.is_string(kind) or pat.is_large_string(kind)):
            continue
        ranges: list[tuple[Any, Any] | None] = []
        for group in range(footer.num_row_groups):
            if footer.row_group(group).num_rows == 0:
                ranges.append(_EMPTY)
                continue
            stats = footer.row_group(group).column(leaf).statistics
            ranges.append((stats.min, stats.max) if stats is not None and stats.has_min_max else None)
        bounds[name] = ranges
    constant = [name for name, ranges in bounds.items()
                if not pat.is_integer(schema.field(name).type)
                and all(r is not None and (r == _EMPTY or r[0] == r[1]) for r in ranges)]
    return footer, leaves, schema, bounds, constant, footer_filters(footer.metadata)


def _may_hold(group: int, bounds: _Bounds, pinned: Mapping[str, list[Any]]) -> bool:
    """Whether row group ``group``'s statistics allow a row with a pinned value in every
    pinned column (integer and string columns; any other, or a value that does not
    compare, never prunes)."""
    for column, values in pinned.items():
        ranges = bounds.get(column)
        known = ranges[group] if ranges is not None else None
        if known == _EMPTY:
            return False  # no rows at all
        if known is None:
            continue
        low, high = known
        try:
            if not any(low <= v <= high for v in values):
                return False
        except TypeError:
            continue
    return True
