"""Writing one file group for one instant: a new base file, a new log file, or (copy on
write) a rewritten base file. Table writes and table-server flushes both end here.

A write is planned first (:func:`plan_file_group_write` names the file it will create, so
the inflight instant can record it for rollback) and executed second
(:func:`write_file_group`), returning the Hudi write stat for the commit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from memtier.hudi.basefile import constant_column, key_order, sort_by_key, with_meta_columns, write_base_file
from memtier.hudi.commit import WriteStat
from memtier.hudi.filenames import BaseFile, LogFile, PendingLogFile
from memtier.hudi.fsview import FileSlice
from memtier.hudi.logformat import avro_data_block, delete_block, parquet_data_block
from memtier.hudi.merge import LogEntry, merge_file_group
from memtier.hudi.slicereader import read_slice
from memtier.hudi.tablemeta import FILE_NAME, TableMeta
from memtier.hudi.timeline import Timeline
from memtier.io import join

__all__ = ["LOG_BLOCK_ROWS", "FileGroupChange", "FileGroupPlan", "log_block_rows", "plan_file_group_write",
           "plan_pending_log_write", "write_file_group"]

_NULL_COMMIT = "null"  # what Hudi writes as prevCommit for a new file group
#: Rows per log data block: a larger change is written as several blocks of the same
#: instant in its log file (as Hudi splits blocks by size), which bounds the memory that
#: encoding one block takes and what a lookup decodes (the row-group size of base files:
#: with a key filter per block, :mod:`memtier.hudi.logfilters`, a lookup decodes the
#: blocks that may hold its keys, not the whole file).
LOG_BLOCK_ROWS = 16_384


def log_block_rows(records: pa.Table) -> list[pa.Table]:
    """``records`` as the data blocks of a log file hold them, in order."""
    return [records.slice(start, LOG_BLOCK_ROWS) for start in range(0, records.num_rows, LOG_BLOCK_ROWS)]


@dataclass(frozen=True)
class FileGroupChange:
    """Rows to upsert (physical columns, one row per key) and record keys to delete.

    ``record_keys``, when given, are the upserted rows' record keys (in row order), so
    the meta columns need not derive them again.
    """

    partition_path: str
    file_id: str
    upserts: pa.Table | None = None
    deleted_keys: pa.Array | None = None  # record-key strings
    record_keys: pa.Array | None = None
    deleted_ordering: pa.Array | None = None  # each delete's ordering value (null: commit order)

    @property
    def num_upserts(self) -> int:
        return self.upserts.num_rows if self.upserts is not None else 0

    @property
    def num_deletes(self) -> int:
        return len(self.deleted_keys) if self.deleted_keys is not None else 0


@dataclass(frozen=True)
class FileGroupPlan:
    """Which file a change goes to: its kind, name, and the slice it builds on."""

    change: FileGroupChange
    kind: str  # "base" (new file group), "log" (merge on read), "rewrite" (copy on write), "pending" (a log
    # file named at completion)
    file_name: str
    slice: FileSlice | None
    task: int

    @property
    def relative_path(self) -> str:
        return join(self.change.partition_path, self.file_name) if self.change.partition_path else self.file_name


def plan_file_group_write(
    meta: TableMeta, change: FileGroupChange, slice_: FileSlice | None, instant: str, task: int
) -> FileGroupPlan | None:
    """The file this change will write, or None when it changes nothing (deletes only,
    to a file group that does not exist)."""
    token = f"{task}-0-0"
    if slice_ is None or (slice_.is_empty and not slice_.compaction_pending):
        if _ordered_deletes(change) and meta.is_merge_on_read:
            # a log-only file group: its ordered deletes must outlive this write (a later
            # upsert of the key with a lower ordering value loses to them)
            name = LogFile(change.file_id, instant, 1, token).name
            return FileGroupPlan(change, "log", name, FileSlice(change.partition_path, change.file_id, instant), task)
        if change.num_upserts == 0:
            return None
        name = BaseFile(change.file_id, token, instant).name
        return FileGroupPlan(change, "base", name, None, task)
    if meta.is_merge_on_read:
        if meta.layout == 1:  # named by the slice's base instant, at the next version
            version = max((f.version for f in slice_.log_files), default=0) + 1
            name = LogFile(change.file_id, slice_.base_instant, version, _attempt_token(task, instant)).name
        else:  # versions 8 and 9: named by the deltacommit itself
            name = LogFile(change.file_id, instant, 1, token).name
        return FileGroupPlan(change, "log", name, slice_, task)
    name = BaseFile(change.file_id, token, instant).name
    return FileGroupPlan(change, "rewrite", name, slice_, task)


def _attempt_token(task: int, instant: str) -> str:
    """The write token of a log file named by its slice (table version 6), not by its
    instant: the instant's time of day as Spark's stage id, so that an attempt rolled back
    and the retry that takes the same version never share a name (readers keep what they
    decoded of a log file by its name and size, and the retry of the same blocks is
    often the same size)."""
    return f"{task}-{int(instant[8:])}-0"


def plan_pending_log_write(change: FileGroupChange, task: int, token: str) -> FileGroupPlan | None:
    """A log file for this change written ahead of its commit by one of several tasks of
    one instant (``token``, unique per task attempt and never a flush's ``<task>-0-0``,
    keeps their names apart), under a temporary name
    (:class:`~memtier.hudi.filenames.PendingLogFile`): the master names it at completion,
    in the slice and at the version that put it after every log file of the file group
    completed before (:mod:`memtier.hudi.logorder`). None when it changes nothing."""
    if change.num_upserts == 0 and change.num_deletes == 0:
        return None
    return FileGroupPlan(change, "pending", PendingLogFile.new(change.file_id, token).name, None, task)


def _ordered_deletes(change: FileGroupChange) -> bool:
    """Whether some delete of the change carries an ordering value (other than Hudi's
    zero): a delete in commit order of a key no file holds changes nothing."""
    ordering = change.deleted_ordering
    if ordering is None or not change.num_deletes:
        return False
    if pat.is_integer(ordering.type):
        return bool(pc.any(pc.not_equal(ordering, 0)).as_py())
    return ordering.null_count < len(ordering)


def _delete_runs(change: FileGroupChange) -> list[tuple[pa.Array, pa.Array | None]]:
    """The change's deletes as the keys and ordering values of one delete block each: those
    in commit order (no ordering value, or an integer zero), then the ordered ones, as
    hudi-rs refuses a block whose ordering values are of more than one type."""
    keys, ordering = change.deleted_keys, change.deleted_ordering
    if not change.num_deletes:
        return []
    if ordering is None:
        return [(keys, None)]
    in_commit_order = ordering.is_null()
    if pat.is_integer(ordering.type):
        in_commit_order = pc.or_(in_commit_order, pc.fill_null(pc.equal(ordering, 0), False))
    ordered = pc.invert(in_commit_order)
    runs = [(keys.filter(in_commit_order), None), (keys.filter(ordered), ordering.filter(ordered))]
    return [(k, v) for k, v in runs if len(k)]


def _records(meta: TableMeta, plan: FileGroupPlan, instant: str, file_name: str) -> pa.Table:
    change = plan.change
    assert change.upserts is not None
    return with_meta_columns(
        change.upserts,
        instant=instant,
        task=plan.task,
        key_fields=meta.config.record_key_fields,
        partition_path=change.partition_path,
        file_name=file_name,
        keys=change.record_keys,
    )


def _write_log(meta: TableMeta, plan: FileGroupPlan, instant: str) -> tuple[int, int]:
    """Data blocks and/or a delete block in a new log file; returns (size, blocks)."""
    change = plan.change
    sizes: list[int] = []

    def blocks() -> Iterator[bytes | pa.Buffer]:
        """Each block encoded only once the one before is written: one block in memory."""
        if change.num_upserts:
            records = _records(meta, plan, instant, change.file_id)
            encode = avro_data_block if meta.config.log_block_format == "avro" else parquet_data_block
            for rows in log_block_rows(records):
                block = encode(rows, meta.avro_schema_with_meta, instant)
                sizes.append(len(block))
                yield block
        ordering = meta.merge_spec.ordering_column
        ordering_type = meta.physical.field(ordering).type if ordering else None
        for keys, values in _delete_runs(change):
            partitions = pa.array([change.partition_path] * len(keys), pa.string())
            block = delete_block(keys, partitions, instant, meta.avro_schema_with_meta, ordering_type, values)
            sizes.append(len(block))
            yield block

    meta.io.create_exclusive(join(meta.base_path, plan.relative_path), blocks())
    return sum(sizes), len(sizes)


def _rewrite(meta: TableMeta, plan: FileGroupPlan, instant: str, visible: Timeline) -> tuple[int, int]:
    """Copy on write: merge the change into the current base file; returns (size, rows)."""
    change = plan.change
    assert plan.slice is not None
    current = read_slice(meta, plan.slice, visible, meta.file_schema.names)
    entries = []
    if change.num_upserts:
        entries.append(LogEntry(records=_records(meta, plan, instant, plan.file_name)))
    if change.num_deletes:
        entries.append(LogEntry(deleted_keys=change.deleted_keys, deleted_ordering=change.deleted_ordering))
    merged = merge_file_group(current, entries, meta.merge_spec)
    assert merged is not None
    merged = merged.set_column(
        merged.column_names.index(FILE_NAME), FILE_NAME, constant_column(plan.file_name, merged.num_rows)
    )
    if not meta.keyless:
        merged = sort_by_key(merged, meta.config.record_key_fields)
    size = write_base_file(meta.io, join(meta.base_path, plan.relative_path), merged,
                           meta.filtered_key_fields)
    return size, merged.num_rows


def _in_key_order(meta: TableMeta, plan: FileGroupPlan) -> FileGroupPlan:
    """The plan with its upserts in record-key order, as every base file is written
    (writers route rows of an integer key sorted already: then this only checks)."""
    change = plan.change
    if meta.keyless or change.upserts is None:
        return plan
    order = key_order(change.upserts.select(list(meta.config.record_key_fields)))
    if order is None:
        return plan
    taken = pa.array(order)
    keys = change.record_keys.take(taken) if change.record_keys is not None else None
    return dataclasses.replace(plan, change=dataclasses.replace(
        change, upserts=change.upserts.take(taken), record_keys=keys))


def write_file_group(meta: TableMeta, plan: FileGroupPlan, instant: str, visible: Timeline) -> WriteStat:
    """Execute a plan: write its one file durably and describe it for the commit."""
    change = plan.change
    if plan.kind == "base":
        plan = _in_key_order(meta, plan)
        records = _records(meta, plan, instant, plan.file_name)
        size = write_base_file(meta.io, join(meta.base_path, plan.relative_path), records,
                               meta.filtered_key_fields)
        return WriteStat(
            file_id=change.file_id, path=plan.relative_path, partition_path=change.partition_path,
            prev_commit=_NULL_COMMIT, num_writes=records.num_rows, num_inserts=records.num_rows,
            num_update_writes=0, num_deletes=0, total_write_bytes=size, file_size=size,
        )
    if plan.kind == "pending":  # named, with the slice it joins, when its commit completes
        size, _blocks = _write_log(meta, plan, instant)
        return WriteStat(
            file_id=change.file_id, path=plan.relative_path, partition_path=change.partition_path,
            prev_commit=_NULL_COMMIT, num_writes=change.num_upserts, num_inserts=0,
            num_update_writes=change.num_upserts, num_deletes=change.num_deletes,
            total_write_bytes=size, file_size=size,
        )
    assert plan.slice is not None
    if plan.kind == "log":
        size, _blocks = _write_log(meta, plan, instant)
        base_name = plan.slice.base_file.name if plan.slice.base_file is not None else None
        return WriteStat(
            file_id=change.file_id, path=plan.relative_path, partition_path=change.partition_path,
            prev_commit=_NULL_COMMIT if plan.slice.is_empty else plan.slice.base_instant,
            num_writes=change.num_upserts, num_inserts=0,
            num_update_writes=change.num_upserts, num_deletes=change.num_deletes,
            total_write_bytes=size, file_size=size, log_version=LogFile.parse(plan.file_name).version,
            log_offset=0, base_file=base_name, log_files=(plan.file_name,),
        )
    size, rows = _rewrite(meta, plan, instant, visible)
    return WriteStat(
        file_id=change.file_id, path=plan.relative_path, partition_path=change.partition_path,
        prev_commit=plan.slice.base_instant, num_writes=rows, num_inserts=0,
        num_update_writes=change.num_upserts, num_deletes=change.num_deletes,
        total_write_bytes=size, file_size=size,
    )
