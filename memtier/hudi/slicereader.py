"""Reading one file slice: its base file, its log blocks, and the two merged."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache, partial

import pyarrow as pa
import pyarrow.parquet as pq

from memtier.hudi.avro import avro_to_arrow_schema
from memtier.hudi.cache import SliceCache
from memtier.hudi.evolution import project_array
from memtier.hudi.fsview import FileSlice
from memtier.hudi.keyread import KeyFilter, LogKeys, read_key_rows
from memtier.hudi.keys import record_keys
from memtier.hudi.logfilters import LogFilter, log_filters
from memtier.hudi.logformat import (
    BlockType,
    HeaderKey,
    LogBlock,
    iter_blocks,
    read_data_block,
    read_delete_block,
)
from memtier.hudi.merge import LogEntry, merge_file_group
from memtier.hudi.tablemeta import RECORD_KEY, TableMeta
from memtier.hudi.timeline import Timeline
from memtier.io import join

__all__ = ["SliceFiles", "conform_columns", "merge_slice", "read_base_file", "read_log_entries", "read_slice",
           "read_slice_files"]

log = logging.getLogger(__name__)


def conform_columns(table: pa.Table, schema: pa.Schema, columns: Sequence[str]) -> pa.Table:
    """``table`` reduced to ``columns`` with ``schema``'s types (read up to them: rows
    written under an older schema of the table); absent columns become null."""
    arrays = []
    for name in columns:
        target = schema.field(name).type
        if name in table.column_names:
            column = table.column(name)
            arrays.append(project_array(column, target))
        else:
            arrays.append(pa.nulls(table.num_rows, target))
    return pa.Table.from_arrays(arrays, schema=pa.schema([schema.field(n) for n in columns]))


def _with_record_keys(table: pa.Table, meta: TableMeta) -> pa.Table:
    """Fill ``_hoodie_record_key`` from the key columns where the writer left it empty."""
    if RECORD_KEY not in table.column_names:
        return table
    column = table.column(RECORD_KEY)
    if column.null_count < table.num_rows or table.num_rows == 0:
        return table
    keys = record_keys(table, meta.config.record_key_fields)
    return table.set_column(table.column_names.index(RECORD_KEY), RECORD_KEY, keys)


def _load_columns(meta: TableMeta, columns: Sequence[str]) -> list[str]:
    """The columns to load: ``columns`` plus what computing missing record keys needs."""
    if RECORD_KEY in columns and not meta.config.populate_meta_fields:
        extra = [f for f in meta.config.record_key_fields if f not in columns]
        return [*columns, *extra]
    return list(columns)


def read_base_file(meta: TableMeta, path: str, columns: Sequence[str],
                   keys: KeyFilter | None = None, cache: SliceCache | None = None) -> pa.Table:
    """Columns of a base Parquet file, typed as the table's file schema. With ``keys``,
    only the rows passing them (with a ``cache`` too, only those rows are decoded: see
    :mod:`memtier.hudi.keyread`)."""
    load = _load_columns(meta, columns)
    keyed = None
    if keys is not None and cache is not None and _keys_readable(meta, keys):
        keyed = read_key_rows(meta.io, path, load, keys, cache)
    if keyed is not None and keyed.num_rows == 0:  # the usual answer of a slice lacking the key
        return pa.schema([meta.file_schema.field(c) for c in columns]).empty_table()
    if keyed is None:
        with meta.io.open_input(path) as source:
            parquet = pq.ParquetFile(source)
            present = [c for c in load if c in parquet.schema_arrow.names]
            table = parquet.read(columns=present)
    table = conform_columns(table if keyed is None else keyed, meta.file_schema, load)
    table = _with_record_keys(table, meta).select(list(columns))
    return keys.filter(table) if keys is not None and keyed is None else table


def _keys_readable(meta: TableMeta, keys: KeyFilter) -> bool:
    """Whether the file's own key columns answer ``keys``: not where the filters name
    ``_hoodie_record_key`` and the writer left it empty (the reader computes it)."""
    return RECORD_KEY not in keys.columns or meta.config.populate_meta_fields


#: One log block of a file, decoded: (instant, block type, rollback target, merge entry).
_Block = tuple[str | None, BlockType, str | None, LogEntry | None]
_DATA = (BlockType.AVRO_DATA, BlockType.PARQUET_DATA)


def _parsed(meta: TableMeta, path: str) -> list[LogBlock]:
    """The blocks of one log file, framed, not decoded (corrupt blocks skipped)."""
    found = []
    for block in iter_blocks(memoryview(meta.io.read_bytes(path)), path):
        if block.block_type == BlockType.CORRUPT:
            log.warning("skipping a corrupt log block in %s at byte %d", path, block.offset)
            continue
        found.append(block)
    return found


def _decoded(meta: TableMeta, block: LogBlock, columns: Sequence[str]) -> _Block:
    """One block, decoded."""
    entry = None
    if block.block_type in _DATA:
        load = _load_columns(meta, columns)
        records = conform_columns(read_data_block(block, _written(block, load)), meta.file_schema, load)
        entry = LogEntry(records=_with_record_keys(records, meta).select(list(columns)))
    elif block.block_type == BlockType.DELETE:
        ordering = meta.merge_spec.ordering_column
        deletes = read_delete_block(block, meta.physical.field(ordering).type if ordering else None)
        entry = LogEntry(
            deleted_keys=deletes.column("record_key").combine_chunks(),
            deleted_ordering=deletes.column("ordering_val").combine_chunks(),
        )
    target = block.target_instant_time if block.block_type == BlockType.COMMAND else None
    return block.instant_time, block.block_type, target, entry


def _decoded_blocks(meta: TableMeta, path: str, columns: Sequence[str]) -> list[_Block]:
    """Every block of one log file, decoded (corrupt blocks skipped)."""
    return [_decoded(meta, block, columns) for block in _parsed(meta, path)]


class _CachedLog:
    """One log file of a given size, its blocks decoded one at a time as reads need them
    and kept in ``cache`` (a lookup decodes only the blocks that may hold its keys): the
    file is read and framed once (its blocks' headers and places cached), then a block
    not decoded yet is read alone, by its place."""

    def __init__(self, meta: TableMeta, path: str, size: int, cache: SliceCache) -> None:
        self._meta, self._path, self._size, self._cache = meta, path, size, cache
        self._framed: list[LogBlock] | None = None

    def headers(self) -> list[tuple[str | None, BlockType, str | None, int, int]]:
        """Each block's instant, type, rollback target, offset and size."""
        def framed() -> list[tuple[str | None, BlockType, str | None, int, int]]:
            self._framed = _parsed(self._meta, self._path)
            return [(b.instant_time, b.block_type, b.target_instant_time if b.block_type == BlockType.COMMAND else None,
                     b.offset, b.size) for b in self._framed]
        return self._cache.get(("log headers", self._path, self._size), framed)

    def _block(self, number: int) -> LogBlock:
        if self._framed is not None:
            return self._framed[number]
        *_, offset, size = self.headers()[number]
        return next(iter_blocks(self._meta.io.read_range(self._path, offset, size), self._path))

    def entry(self, number: int, columns: Sequence[str]) -> LogEntry | None:
        """Block ``number``'s merge entry."""
        return self._cache.get(("log block", self._path, self._size, self._meta.schema_version, tuple(columns), number),
                               lambda: _decoded(self._meta, self._block(number), columns))[3]

    def keys(self, number: int, columns: Sequence[str], key_columns: Sequence[str]) -> LogKeys | None:
        """A key index of data block ``number`` (None when it lacks a key column)."""
        def index() -> LogKeys | None:
            entry = self.entry(number, columns)
            if entry is None or entry.records is None or not all(c in entry.records.column_names for c in key_columns):
                return None
            return LogKeys.of(entry.records.select(list(key_columns)))
        return self._cache.get(("log keys", self._path, self._size, self._meta.schema_version, tuple(columns),
                                tuple(key_columns), number), index)


def _written(block: LogBlock, columns: Sequence[str]) -> pa.Schema | None:
    """The writer's own types of those ``columns`` an Avro block holds: only they are
    decoded (a lookup reads two or three of a table's columns: ~30% of a block's decode
    saved); None (every column) for other blocks."""
    text = block.header.get(HeaderKey.SCHEMA) if block.block_type == BlockType.AVRO_DATA else None
    if text is None:
        return None
    writer = _arrow_schema(text)
    return pa.schema([writer.field(c) for c in columns if c in writer.names])


@lru_cache(maxsize=64)
def _arrow_schema(avro_schema: str) -> pa.Schema:
    return avro_to_arrow_schema(avro_schema)


def read_log_entries(
    meta: TableMeta, slice_: FileSlice, visible: Timeline, columns: Sequence[str],
    *, cache: SliceCache | None = None, sizes: Sequence[int] | None = None,
    key_filter: KeyFilter | None = None,
) -> list[LogEntry]:
    """The slice's committed log blocks, in log order, as merge entries.

    Blocks of instants that are not completed in ``visible`` are skipped, and a rollback
    command block drops every earlier block of its target instant, as Hudi readers do.
    A ``cache`` keeps each block of a log file decoded, keyed by the file's path and size
    (``sizes``, as listed: a file only ever grows by appended blocks), for every later
    read. With a ``key_filter`` only the records of those keys are kept (through a key
    index of each block, kept in the cache too), and the data blocks whose key filters
    hold none of them are not decoded, nor a file none of whose blocks does
    (:mod:`memtier.hudi.logfilters`).
    """
    tagged: list[tuple[str, LogEntry]] = []
    paths = slice_.log_file_paths(meta.base_path)
    filters = (log_filters(meta, visible, cache)
               if key_filter is not None and cache is not None and sizes is not None and meta.filtered_key_fields
               else {})
    for i, path in enumerate(paths):
        if cache is None or sizes is None:
            blocks: Iterable[_Block] = _decoded_blocks(meta, path, columns)
        else:
            written = filters.get(join(slice_.partition_path, slice_.log_files[i].name))
            blocks = _cached_blocks(meta, _CachedLog(meta, path, sizes[i], cache), columns, visible, key_filter,
                                    written if written is not None and written.size == sizes[i] else None)
        for instant, block_type, target, entry in blocks:
            if block_type == BlockType.COMMAND:
                tagged = [(t, e) for t, e in tagged if t != target]
            elif entry is not None and instant is not None and visible.is_completed(instant):
                if key_filter is not None and cache is None:
                    entry = _filtered(entry, key_filter)
                if entry is not None:
                    tagged.append((instant, entry))
    return [entry for _, entry in tagged]


def _cached_blocks(meta: TableMeta, logged: _CachedLog, columns: Sequence[str], visible: Timeline,
                   key_filter: KeyFilter | None, written: LogFilter | None) -> Iterator[_Block]:
    """The blocks of a cached log file a read needs, decoded (only the records of the
    ``key_filter``'s keys): rollback commands, and the data and delete blocks of
    completed instants, but not the data blocks whose ``written`` key filters hold none
    of the keys (none of the file's when no block's does)."""
    holding = None  # which blocks may hold the keys (None: any)
    if written is not None and key_filter is not None:
        holding = [key_filter.may_be_in(blooms, meta.file_schema) for blooms in written.blocks]
        if not any(holding):
            return  # not read at all (a file with filters holds no rollback command)
    headers = logged.headers()
    if holding is not None and (len(holding) != len(headers) or any(h[1] not in _DATA for h in headers)):
        holding = None  # not the blocks the filters were written for
    for number, (instant, block_type, target, _, _) in enumerate(headers):
        if block_type == BlockType.COMMAND:
            yield instant, block_type, target, None
            continue
        if instant is None or not visible.is_completed(instant) or (holding is not None and not holding[number]):
            continue
        entry = logged.entry(number, columns)
        if entry is not None and key_filter is not None:
            entry = _filtered(entry, key_filter, logged.keys(number, columns, key_filter.columns))
        yield instant, block_type, target, entry


def read_slice(
    meta: TableMeta,
    slice_: FileSlice,
    visible: Timeline,
    columns: Sequence[str],
    *,
    with_logs: bool = True,
    extra: Sequence[LogEntry] = (),
    cache: SliceCache | None = None,
    key_filter: KeyFilter | None = None,
    log_sizes: Sequence[int] | None = None,
) -> pa.Table | None:
    """The slice's live rows (``columns`` only; must include the merge key and ordering).

    ``extra`` entries come after the slice's log blocks: rows not yet flushed into the
    table (from table-server memory or WAL), merged exactly as later log blocks would be.
    A ``cache`` keeps decoded base files and log files for the next read (log files by
    their ``log_sizes``, as listed). ``key_filter`` (on record-key columns only: see
    :func:`~memtier.hudi.filters.key_filters`) drops rows of every source before the
    merge; with a cache, a base file then yields only those rows
    (:mod:`memtier.hudi.keyread`) and is not kept whole.
    """
    files = read_slice_files(meta, slice_, visible, columns, with_logs=with_logs, cache=cache,
                             key_filter=key_filter, log_sizes=log_sizes)
    return merge_slice(meta, files, extra, key_filter) if with_logs else files.base


@dataclasses.dataclass(frozen=True)
class SliceFiles:
    """What a file slice's files hold for a read: its base file's rows and its log
    entries (none when logs are not read), not yet merged."""

    base: pa.Table | None
    entries: list[LogEntry]


def read_slice_files(
    meta: TableMeta,
    slice_: FileSlice,
    visible: Timeline,
    columns: Sequence[str],
    *,
    with_logs: bool = True,
    cache: SliceCache | None = None,
    key_filter: KeyFilter | None = None,
    log_sizes: Sequence[int] | None = None,
) -> SliceFiles:
    """The slice's files read as :func:`read_slice` reads them, before the merge."""
    base_path = slice_.base_file_path(meta.base_path)
    base = None
    if base_path is not None:
        if key_filter is not None and cache is not None:
            base = read_base_file(meta, base_path, columns, key_filter, cache)
        else:
            load_base = partial(read_base_file, meta, base_path, columns)
            base = cache.get(("base", base_path, meta.schema_version, tuple(columns)), load_base) if cache else load_base()
            if key_filter is not None:
                base = key_filter.filter(base)
    entries: list[LogEntry] = []
    if with_logs and slice_.log_files:
        entries = read_log_entries(meta, slice_, visible, columns, cache=cache, sizes=log_sizes,
                                   key_filter=key_filter)
    return SliceFiles(base, entries)


def merge_slice(meta: TableMeta, files: SliceFiles, extra: Sequence[LogEntry] = (),
                key_filter: KeyFilter | None = None) -> pa.Table | None:
    """A slice's live rows: its ``files`` merged with the ``extra`` entries after them
    (``key_filter`` applied to those first, as :func:`read_slice_files` applied it to the
    files)."""
    if not files.entries and not extra:
        return files.base
    if key_filter is not None:
        extra = [f for e in extra if (f := _filtered(e, key_filter)) is not None]
    return merge_file_group(files.base, [*files.entries, *extra], meta.merge_spec)


def _filtered(entry: LogEntry, key_filter: KeyFilter, index: LogKeys | None = None) -> LogEntry | None:
    """The entry's records of the filter's keys; None when it has none (and no deletes)."""
    if entry.records is None:
        return entry
    rows = index.rows(key_filter) if index is not None else key_filter.rows(entry.records)
    if len(rows) == entry.records.num_rows:
        return entry
    if not len(rows) and entry.deleted_keys is None:
        return None
    taken = pa.array(rows)
    mask = entry.delete_mask.take(taken) if entry.delete_mask is not None else None
    return dataclasses.replace(entry, records=entry.records.take(taken), delete_mask=mask)
