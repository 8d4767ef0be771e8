"""Writing batches to a table as one Hudi instant, and rolling back failed instants.

The protocol (Hudi's own): ``<t>.<action>.requested`` -> ``<t>.<action>.inflight`` naming
every file the write will create -> the data files, each fsync'd -> ``<t>.<action>``
(complete, atomic). Readers ignore files and log blocks of instants that are not complete,
so a writer killed anywhere before the last step leaves the table as it was; the next
writer rolls the failed instant back: deletes the files its inflight named, then records
a Hudi rollback instant.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from memtier.errors import (
    AlreadyExistsError,
    CommitFailedError,
    CommitStateUnknownError,
    InvalidArgumentError,
    NotFoundError,
)
from memtier.hudi.commit import CommitMetadata, WriteStat
from memtier.hudi.filegroup import (
    FileGroupChange,
    FileGroupPlan,
    log_block_rows,
    plan_file_group_write,
    write_file_group,
)
from memtier.hudi.filenames import BaseFile, LogFile, bucket_or_none, classify
from memtier.hudi.fsview import FileSystemView, list_data_files
from memtier.hudi.logfilters import delete_log_filters, write_log_filters
from memtier.hudi.logformat import iter_blocks
from memtier.hudi.routing import route
from memtier.hudi.schema import check_ordering_not_null, conform, leavable
from memtier.hudi.tablemeta import TableMeta
from memtier.hudi.timeline import Instant, State, Timeline, new_instant_time
from memtier.io import basename, join, parent, relpath
from memtier.parallel import parallel_map

__all__ = [
    "OPERATIONS",
    "commit_action",
    "commit_metadata",
    "ensure_partition_metadata",
    "existing_buckets",
    "plan_changes",
    "planned_metadata",
    "prepare_write",
    "rollback_instant",
    "rollback_pending",
    "write_batch",
    "write_files",
]

log = logging.getLogger(__name__)

#: write operation -> Hudi operationType
OPERATIONS = {"upsert": "UPSERT", "insert": "INSERT", "delete": "DELETE"}


def commit_action(meta: TableMeta) -> str:
    """The action of a write's commit: a deltacommit of a merge-on-read table, else a commit."""
    return "deltacommit" if meta.is_merge_on_read else "commit"


def prepare_write(meta: TableMeta, data: Any, operation: str) -> pa.Table:
    """The batch in physical types, validated before anything touches the timeline."""
    meta.require_bucket_index()
    if operation not in OPERATIONS:
        raise InvalidArgumentError(f"operation must be one of {sorted(OPERATIONS)}, got {operation!r}")
    if operation == "delete":
        required = list(dict.fromkeys([*meta.config.record_key_fields, *meta.config.partition_fields]))
        table = conform(data, meta.schema, required=required)
        return conform(table, meta.physical, required=required)
    config = meta.config
    optional = leavable(meta.schema, config.record_key_fields, config.partition_fields, config.ordering_field)
    table = conform(data, meta.schema, optional=optional)
    check_ordering_not_null(table, config.ordering_field)
    return conform(table, meta.physical)


def existing_buckets(view: FileSystemView) -> dict[tuple[str, int], str]:
    """(partition, bucket) -> the file id of that bucket's file group."""
    existing: dict[tuple[str, int], str] = {}
    for partition, file_id in view.file_groups:
        bucket = bucket_or_none(file_id)
        if bucket is not None:
            existing[(partition, bucket)] = file_id
    return existing


def commit_metadata(
    meta: TableMeta, stats: Sequence[WriteStat], operation: str, extra: dict[str, str] | None = None,
    *, compacted: bool = False, replaced: Sequence[tuple[str, str]] = (),
) -> CommitMetadata:
    """The commit's metadata: one write stat per file, the schema (Hudi's and memtier's:
    :meth:`TableMeta.schema_metadata`), ``extra`` keys;
    ``compacted`` for a compaction, ``replaced`` (partition, file id) for a replacecommit."""
    replaced_ids: dict[str, list[str]] = {}
    for partition, file_id in replaced:
        replaced_ids.setdefault(partition, []).append(file_id)
    return CommitMetadata(
        partition_to_write_stats={},
        extra_metadata={**meta.schema_metadata(), **(extra or {})},
        operation_type=operation,
        compacted=compacted,
        partition_to_replace_file_ids={p: tuple(ids) for p, ids in replaced_ids.items()},
    ).with_stats(stats)


def planned_metadata(meta: TableMeta, plans: Sequence[FileGroupPlan], operation: str) -> CommitMetadata:
    """The inflight's content: skeleton stats naming every file the write will create."""
    return commit_metadata(meta, _planned_stats(plans), operation)


def plan_changes(
    meta: TableMeta, changes: Sequence[FileGroupChange], view: FileSystemView, instant: str
) -> list[FileGroupPlan]:
    """One file to write per change that changes anything."""
    plans = []
    for task, change in enumerate(changes):
        slice_ = view.slice_for_write(change.partition_path, change.file_id)
        plan = plan_file_group_write(meta, change, slice_, instant, task)
        if plan is not None:
            plans.append(plan)
    return plans


def _planned_stats(plans: Sequence[FileGroupPlan]) -> list[WriteStat]:
    return [
        WriteStat(
            file_id=p.change.file_id, path=p.relative_path, partition_path=p.change.partition_path,
            prev_commit=p.slice.base_instant if p.slice is not None else "null", num_writes=0,
            num_inserts=0, num_update_writes=0, num_deletes=0, total_write_bytes=0, file_size=0,
        )
        for p in plans
    ]


def write_batch(meta: TableMeta, data: Any, operation: str = "upsert") -> str | None:
    """Write one batch as one instant; returns the instant, or None for an empty batch."""
    table = prepare_write(meta, data, operation)
    if table.num_rows == 0:
        return None
    timeline = rollback_pending(meta)
    view = FileSystemView.build(meta.io, meta.base_path, timeline)
    changes = route(meta, table, deletes=operation == "delete", existing=existing_buckets(view))
    instant = new_instant_time(timeline.last_timestamp())
    plans = plan_changes(meta, changes, view, instant)
    if not plans:
        return None
    writer = meta.timeline_writer()
    action = commit_action(meta)
    hudi_operation = OPERATIONS[operation]
    try:
        requested = writer.request(instant, action)
    except AlreadyExistsError as e:
        raise CommitFailedError(f"instant {instant} was taken by another writer; retry") from e
    inflight = writer.inflight(requested, planned_metadata(meta, plans, hudi_operation).encode(meta.layout))
    ensure_partition_metadata(meta, {p.change.partition_path for p in plans}, instant)
    stats = write_files(meta, plans, instant, timeline)
    content = commit_metadata(meta, stats, hudi_operation).encode(meta.layout)
    try:
        writer.complete(inflight, content)
    except Exception as e:
        raise CommitStateUnknownError(
            f"completing instant {instant} of {meta.base_path} failed: {e}; re-read the timeline"
        ) from e
    return instant


def write_files(
    meta: TableMeta, plans: Sequence[FileGroupPlan], instant: str, timeline: Timeline
) -> list[WriteStat]:
    """Write every plan's file durably (in parallel threads), and the key filters of its
    log files (:mod:`memtier.hudi.logfilters`); their write stats."""

    def one(plan: FileGroupPlan) -> WriteStat:
        return write_file_group(meta, plan, instant, timeline)

    stats = parallel_map(one, plans)
    if meta.filtered_key_fields:
        write_log_filters(meta, instant, {
            plan.relative_path: (stat.file_size, log_block_rows(plan.change.upserts.select(list(meta.filtered_key_fields))))
            for plan, stat in zip(plans, stats, strict=True)
            if plan.kind == "log" and plan.change.upserts is not None and not plan.change.num_deletes
        })
    return stats


def ensure_partition_metadata(meta: TableMeta, partitions: set[str], instant: str) -> None:
    """Every partition folder holds ``.hoodie_partition_metadata`` (Java readers need it)."""
    depth = len(meta.config.partition_fields)
    for partition in partitions:
        path = join(meta.base_path, partition, ".hoodie_partition_metadata")
        if meta.io.exists(path):
            continue
        text = f"#partition metadata\ncommitTime={instant}\npartitionDepth={depth}\n"
        try:
            meta.io.create_exclusive(path, text.encode())
        except AlreadyExistsError:
            pass


# --- rollback ------------------------------------------------------------------------


def _files_of(meta: TableMeta, target: Instant) -> dict[str, list[str]]:
    """Files a failed instant may have created: those its inflight named, plus base files
    carrying its timestamp (a foreign writer's inflight may name none)."""
    found: dict[str, set[str]] = {}
    inflight = Instant(target.timestamp, target.action, State.INFLIGHT)
    inflight_path = meta.timeline().instant_path(meta.base_path, inflight)
    if meta.io.exists(inflight_path):
        content = meta.io.read_bytes(inflight_path)
        if content.strip():
            for partition, stats in CommitMetadata.decode(content).partition_to_write_stats.items():
                for stat in stats:
                    if stat.path and _written_by(meta, join(meta.base_path, stat.path), target.timestamp):
                        found.setdefault(partition, set()).add(basename(stat.path))
    for info in list_data_files(meta.io, meta.base_path):
        parsed = classify(basename(info.path))
        if isinstance(parsed, BaseFile) and parsed.instant == target.timestamp:
            partition = relpath(meta.base_path, parent(info.path))
            found.setdefault(partition, set()).add(parsed.name)
    return {p: sorted(names) for p, names in found.items()}


def _written_by(meta: TableMeta, path: str, instant: str) -> bool:
    """Whether the file an inflight plan names at ``path`` is that instant's to delete: a
    base file carries its instant in its name, but a log file is named by its slice and a
    version, and another writer may have created that name first (files are created
    exclusively: a table server taken for dead and the one that took over its buckets can
    plan the same next version), so a log file counts only if its first block is of
    ``instant``. A missing file counts not: there is nothing to delete."""
    if not isinstance(classify(basename(path)), LogFile):
        return True
    try:
        first = next(iter_blocks(meta.io.read_bytes(path), path), None)
    except NotFoundError:
        return False
    return first is None or first.instant_time in (None, instant)


def rollback_instant(meta: TableMeta, target: Instant, timeline: Timeline) -> str:
    """Undo a pending write instant: record a Hudi rollback plan naming its files, delete
    them, drop the instant. A crash midway is finished by :func:`rollback_pending`."""
    if target.state == State.COMPLETED:
        raise InvalidArgumentError(f"instant {target.timestamp} is complete; it cannot be rolled back")
    files = _files_of(meta, target)
    timestamp = new_instant_time(timeline.last_timestamp())
    delete_log_filters(meta, target.timestamp)  # (readers ignore it anyway: the instant never completes)
    meta.timeline_writer().rollback(target, files, timestamp)
    log.info("rolled back instant %s of %s (%d files)", target.timestamp, meta.base_path,
             sum(len(n) for n in files.values()))
    return timestamp


def rollback_pending(meta: TableMeta, keep: Callable[[Instant], bool] = lambda _: False) -> Timeline:
    """Finish interrupted rollbacks, then roll back every pending write instant but those
    to ``keep`` (a live Hudi writer's); returns the timeline afterwards."""
    timeline = meta.timeline()
    writer = meta.timeline_writer()
    for rollback in timeline.pending(("rollback",)):
        writer.resume_rollback(rollback)
    timeline = meta.timeline()
    for instant in timeline.pending(("commit", "deltacommit")):
        if keep(instant):
            continue
        rollback_instant(meta, instant, timeline)
        timeline = meta.timeline()
    return timeline
