"""Reading one file slice: its base file, its log blocks, and the two merged."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from memtier.hudi.cache import SliceCache
from memtier.hudi.fsview import FileSlice
from memtier.hudi.keys import record_keys
from memtier.hudi.logformat import (
    BlockType,
    LogBlock,
    iter_blocks,
    read_data_block,
    read_delete_block,
)
from memtier.hudi.merge import LogEntry, merge_file_group
from memtier.hudi.tablemeta import RECORD_KEY, TableMeta
from memtier.hudi.timeline import Timeline

__all__ = ["conform_columns", "read_base_file", "read_log_entries", "read_slice"]

log = logging.getLogger(__name__)


def conform_columns(table: pa.Table, schema: pa.Schema, columns: Sequence[str]) -> pa.Table:
    """``table`` reduced to ``columns`` with ``schema``'s types; absent columns become null."""
    arrays = []
    for name in columns:
        target = schema.field(name).type
        if name in table.column_names:
            column = table.column(name)
            arrays.append(column if column.type == target else column.cast(target))
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


def read_base_file(meta: TableMeta, path: str, columns: Sequence[str]) -> pa.Table:
    """Columns of a base Parquet file, typed as the table's file schema."""
    load = _load_columns(meta, columns)
    with meta.io.open_input(path) as source:
        parquet = pq.ParquetFile(source)
        present = [c for c in load if c in parquet.schema_arrow.names]
        table = parquet.read(columns=present)
    table = conform_columns(table, meta.file_schema, load)
    return _with_record_keys(table, meta).select(list(columns))


def _blocks_in_order(meta: TableMeta, slice_: FileSlice) -> list[LogBlock]:
    blocks: list[LogBlock] = []
    for path in slice_.log_file_paths(meta.base_path):
        for block in iter_blocks(memoryview(meta.io.read_bytes(path)), path):
            if block.block_type == BlockType.CORRUPT:
                log.warning("skipping a corrupt log block in %s at byte %d", path, block.offset)
                continue
            blocks.append(block)
    return blocks


def read_log_entries(
    meta: TableMeta, slice_: FileSlice, visible: Timeline, columns: Sequence[str]
) -> list[LogEntry]:
    """The slice's committed log blocks, in log order, as merge entries.

    Blocks of instants that are not completed in ``visible`` are skipped, and a rollback
    command block drops every earlier block of its target instant, as Hudi readers do.
    """
    tagged: list[tuple[str, LogEntry]] = []
    load = _load_columns(meta, columns)
    for block in _blocks_in_order(meta, slice_):
        instant = block.instant_time
        if block.block_type == BlockType.COMMAND:
            target = block.target_instant_time
            tagged = [(t, e) for t, e in tagged if t != target]
            continue
        if instant is None or not visible.is_completed(instant):
            continue
        if block.block_type in (BlockType.AVRO_DATA, BlockType.PARQUET_DATA):
            records = conform_columns(read_data_block(block), meta.file_schema, load)
            records = _with_record_keys(records, meta).select(list(columns))
            tagged.append((instant, LogEntry(records=records)))
        elif block.block_type == BlockType.DELETE:
            deletes = read_delete_block(block)
            tagged.append((instant, LogEntry(
                deleted_keys=deletes.column("record_key").combine_chunks(),
                deleted_ordering=deletes.column("ordering_val").combine_chunks(),
            )))
    return [entry for _, entry in tagged]


def read_slice(
    meta: TableMeta,
    slice_: FileSlice,
    visible: Timeline,
    columns: Sequence[str],
    *,
    with_logs: bool = True,
    extra: Sequence[LogEntry] = (),
    cache: SliceCache | None = None,
    key_filter: pc.Expression | None = None,
) -> pa.Table | None:
    """The slice's live rows (``columns`` only; must include the merge key and ordering).

    ``extra`` entries come after the slice's log blocks: rows not yet flushed into the
    table (from table-server memory or WAL), merged exactly as later log blocks would be.
    A ``cache`` keeps decoded base files and log entries for the next read. ``key_filter``
    (on record-key columns only: see :func:`~memtier.hudi.filters.key_filters`) drops rows
    of every source before the merge.
    """
    base_path = slice_.base_file_path(meta.base_path)
    base = None
    if base_path is not None:
        load_base = partial(read_base_file, meta, base_path, columns)
        base = cache.get(("base", base_path, tuple(columns)), load_base) if cache else load_base()
        if key_filter is not None:
            base = base.filter(key_filter)
    if not with_logs or (not slice_.log_files and not extra):
        return base
    entries: list[LogEntry] = []
    if slice_.log_files:
        load_logs = partial(read_log_entries, meta, slice_, visible, columns)
        if cache is None:
            entries = load_logs()
        else:
            point = (len(visible.completed()), visible.last_timestamp())
            key = ("logs", tuple(slice_.log_file_paths(meta.base_path)), point, tuple(columns))
            entries = cache.get(key, load_logs)
    entries = [*entries, *extra]
    if key_filter is not None:
        entries = [_filtered(e, key_filter) for e in entries]
    return merge_file_group(base, entries, meta.merge_spec)


def _filtered(entry: LogEntry, key_filter: pc.Expression) -> LogEntry:
    if entry.records is None:
        return entry
    if entry.delete_mask is not None:
        mask_table = entry.records.append_column("__mask", entry.delete_mask).filter(key_filter)
        return dataclasses.replace(
            entry, records=mask_table.drop_columns(["__mask"]),
            delete_mask=mask_table.column("__mask").combine_chunks(),
        )
    return dataclasses.replace(entry, records=entry.records.filter(key_filter))
