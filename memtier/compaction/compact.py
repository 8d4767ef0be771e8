"""Compaction: a merge-on-read file slice (base file + log files) becomes a new base file.

Planning picks the slices a policy says are due (:func:`plan_compaction`), executing
writes one base file per slice at the compaction's instant (:func:`compact`). Rows merge
exactly as a snapshot read merges them (deletes applied, the greatest ordering value
winning), so a snapshot read is the same before and after; the read-optimized view then
shows every row the slice held. New base files are in record-key order: a base file
sorted by an integer key stays sorted, only the log side sorted and interleaved; other
keys are sorted whole (:func:`memtier.hudi.merge.compact_file_group`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from memtier.hudi.basefile import constant_column, write_base_file
from memtier.hudi.commit import CommitMetadata, WriteStat
from memtier.hudi.filenames import BaseFile
from memtier.hudi.fsview import FileSlice, FileSystemView
from memtier.hudi.merge import compact_file_group
from memtier.hudi.plans import CompactionOperation, CompactionPlan
from memtier.hudi.slicereader import read_base_file, read_log_entries
from memtier.hudi.tablemeta import FILE_NAME, TableMeta
from memtier.hudi.timeline import Timeline
from memtier.hudi.writer import commit_metadata
from memtier.io import join
from memtier.parallel import parallel_map

__all__ = [
    "CompactionPolicy",
    "SliceDebt",
    "compact",
    "compaction_metadata",
    "plan_compaction",
    "planned_files",
    "slice_debt",
]

#: Hudi's operation type of a compaction commit.
COMPACT_OPERATION = "COMPACT"


@dataclass(frozen=True)
class CompactionPolicy:
    """When a slice is due: it has ``max_log_files`` log files or more, or its logs hold
    ``log_fraction`` of its base file's bytes or more (a log-only slice with any log is due
    once it has ``max_log_files``)."""

    max_log_files: int = 4
    log_fraction: float = 0.2

    def due(self, debt: SliceDebt) -> bool:
        if debt.log_files == 0:
            return False
        if debt.log_files >= self.max_log_files:
            return True
        return debt.base_bytes > 0 and debt.log_bytes >= self.log_fraction * debt.base_bytes


@dataclass(frozen=True)
class SliceDebt:
    """What compacting a slice would fold in: its log files and their bytes."""

    partition_path: str
    file_id: str
    log_files: int
    log_bytes: int
    base_bytes: int


def slice_debt(view: FileSystemView, slice_: FileSlice) -> SliceDebt:
    """The compaction debt of one (latest) slice."""
    p = slice_.partition_path
    base_bytes = view.size_of(p, slice_.base_file.name) if slice_.base_file is not None else 0
    log_bytes = sum(view.size_of(p, f.name) for f in slice_.log_files)
    return SliceDebt(p, slice_.file_id, len(slice_.log_files), log_bytes, base_bytes)


def plan_compaction(
    view: FileSystemView,
    policy: CompactionPolicy,
    *,
    busy: Collection[tuple[str, str]] = (),
    only: Collection[tuple[str, str]] | None = None,
    force: bool = False,
) -> CompactionPlan | None:
    """A plan for the due slices (every slice with log files when ``force``), or None.

    File groups in ``busy`` (touched by a pending write, which may still add a log file
    to the current slice) and those already under a pending compaction or clustering are
    left for a later plan; ``only`` restricts the plan to some file groups.
    """
    operations = []
    for (partition, file_id), group in sorted(view.file_groups.items()):
        key = (partition, file_id)
        if key in busy or key in view.pending_compaction or key in view.pending_clustering:
            continue
        if only is not None and key not in only:
            continue
        latest = group.latest
        debt = slice_debt(view, latest)
        if not (debt.log_files and (force or policy.due(debt))):
            continue
        operations.append(CompactionOperation(
            partition, file_id, latest.base_instant,
            latest.base_file.name if latest.base_file is not None else None,
            tuple(f.name for f in latest.log_files),
            {"TOTAL_LOG_FILES": float(debt.log_files), "TOTAL_LOG_FILES_SIZE": float(debt.log_bytes),
             "TOTAL_IO_READ_MB": (debt.log_bytes + debt.base_bytes) / 1e6},
        ))
    return CompactionPlan(tuple(operations)) if operations else None


def base_file_of(op: CompactionOperation, instant: str, task: int) -> str:
    """Path (relative to the table) of the base file compacting ``op`` writes."""
    name = BaseFile(op.file_id, f"{task}-0-0", instant).name
    return join(op.partition_path, name) if op.partition_path else name


def _compact_one(meta: TableMeta, op: CompactionOperation, instant: str, task: int, visible: Timeline) -> WriteStat:
    slice_ = FileSlice.of_names(op.partition_path, op.file_id, op.base_file, op.log_files, op.base_instant)
    columns = meta.file_schema.names
    base = None
    if slice_.base_file is not None:
        base = read_base_file(meta, join(meta.base_path, op.partition_path, slice_.base_file.name), columns)
    entries = read_log_entries(meta, slice_, visible, columns)
    merged = compact_file_group(base, entries, meta.merge_spec, meta.config.record_key_fields)
    if merged is None:
        merged = meta.file_schema.empty_table()
    relative = base_file_of(op, instant, task)
    name = relative.rsplit("/", 1)[-1]
    merged = merged.set_column(
        merged.column_names.index(FILE_NAME), FILE_NAME, constant_column(name, merged.num_rows)
    )
    size = write_base_file(meta.io, join(meta.base_path, relative), merged, meta.filtered_key_fields)
    log_records = sum(e.records.num_rows for e in entries if e.records is not None)
    deletes = sum(len(e.deleted_keys) for e in entries if e.deleted_keys is not None)
    log_bytes = int(op.metrics.get("TOTAL_LOG_FILES_SIZE", 0))
    return WriteStat(
        file_id=op.file_id, path=relative, partition_path=op.partition_path, prev_commit=op.base_instant,
        num_writes=merged.num_rows, num_inserts=0, num_update_writes=log_records, num_deletes=deletes,
        total_write_bytes=size, file_size=size, total_log_records=log_records + deletes,
        total_log_blocks=len(entries), total_log_files_compacted=len(op.log_files),
        total_log_size_compacted=log_bytes, total_updated_records_compacted=log_records,
    )


def compact(
    meta: TableMeta, instant: str, plan: CompactionPlan, visible: Timeline | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[WriteStat]:
    """Execute a compaction plan: one new base file per operation, written durably (in
    parallel threads); their write stats. ``progress(done, total)`` is called as slices finish."""
    timeline = visible if visible is not None else meta.timeline()
    counter = itertools.count(1)
    lock = threading.Lock()

    def one(item: tuple[int, CompactionOperation]) -> WriteStat:
        stat = _compact_one(meta, item[1], instant, item[0], timeline)
        with lock:
            done = next(counter)
        if progress is not None:
            progress(done, len(plan.operations))
        return stat

    return parallel_map(one, list(enumerate(plan.operations)))


def compaction_metadata(meta: TableMeta, stats: Sequence[WriteStat]) -> CommitMetadata:
    """The ``<t>.commit`` content completing a compaction."""
    return commit_metadata(meta, stats, COMPACT_OPERATION, compacted=True)


def planned_files(plan: CompactionPlan, instant: str) -> list[tuple[str, str]]:
    """(partition, file name) of every base file the plan writes."""
    return [(op.partition_path, base_file_of(op, instant, task).rsplit("/", 1)[-1])
            for task, op in enumerate(plan.operations)]
