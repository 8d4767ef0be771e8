"""Compacting the ``files`` partition of Hudi's metadata table, as Hudi 1.x compacts it.

Each data instant memtier completes adds one log file to the ``files`` file group
(:mod:`memtier.hudi.mdtfiles`), and every Hudi reader listing files through the metadata
table merges all log files of the group's latest slice. Hudi's writers compact that
slice after ``hoodie.metadata.compact.max.delta.commits`` (10) deltacommits; so does
memtier (:func:`compact_files_partition`, which the master runs from its table-service
check under the table's commit lock and Hudi's lock, never inside a flush's commit).

As Hudi 1.x (``HoodieBackedTableMetadataWriter.compactIfNecessary``): the compaction's
instant time is a new instant time, or, when a data instant is pending but its metadata
deltacommit completed (a writer died between the two), 1 ms before the earliest such
instant, so that instant can still be rolled back. The plan (a ``HoodieCompactionPlan``,
requested as ``compaction`` on the metadata timeline) takes the latest slice of
``files-0000-0``: its base file and the log files whose deltacommit completed before
the compaction's instant time (later ones belong to the slice it opens, by completion
time). The base file ``files-0000-0_0-0-0_<instant>.hfile`` holds the merged records
(:func:`merge`: ``HoodieMetadataPayload``'s rules) in an HFile; the instant completes as
a ``commit``. Log files written afterwards are named by their own deltacommit, as ever,
and fall into the new slice by completion time.

Crashes: a pending compaction is ignored by readers (its base file, published
atomically, counts only once the ``commit`` completes; until then the slice it opens
extends the previous one), and the next :func:`compact_files_partition` finishes it from
its plan before planning anything new (a base file left by the dead attempt is
replaced). Log files of compacted slices stay until a Hudi writer's metadata clean.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from io import BytesIO
from typing import Any

import fastavro

from memtier import failpoints
from memtier.errors import CorruptFileError
from memtier.hudi.commit import CommitMetadata, WriteStat
from memtier.hudi.filenames import BaseFile
from memtier.hudi.fsview import FileSlice, FileSystemView
from memtier.hudi.hfile import read_hfile, write_hfile
from memtier.hudi.logformat import BlockType, iter_blocks, read_delete_block
from memtier.hudi.mdtfiles import (
    ALL_PARTITIONS,
    FILE_ID,
    FILES,
    METADATA_LAYOUT,
    NON_PARTITIONED,
    WRITE_TOKEN,
    FilesChange,
    metadata_table_path,
    schema_metadata,
    table_record_schema,
)
from memtier.hudi.plans import CompactionOperation, CompactionPlan
from memtier.hudi.timeline import (
    Instant,
    State,
    Timeline,
    TimelineWriter,
    new_instant_time,
    parse_instant_time,
)
from memtier.io import FileIO, join

__all__ = [
    "DEFAULT_MAX_DELTA_COMMITS",
    "FilesRecord",
    "combine",
    "compact_files_partition",
    "compaction_time",
    "deltacommits_since_base",
    "listing",
    "merge",
    "read_files_partition",
]

log = logging.getLogger(__name__)

#: Hudi's ``hoodie.metadata.compact.max.delta.commits`` default.
DEFAULT_MAX_DELTA_COMMITS = 10


# == the merge (pure) ====================================================================


@dataclass(frozen=True)
class FilesRecord:
    """One ``HoodieMetadataRecord`` of the ``files`` partition: its type (1: the partition
    list, 2: a partition's files) and ``filesystemMetadata``: name -> (size, isDeleted)."""

    kind: int
    files: Mapping[str, tuple[int, bool]]


def combine(old: FilesRecord | None, new: FilesRecord) -> FilesRecord:
    """``new`` merged over ``old`` as ``HoodieMetadataPayload`` merges them: a file listed
    again keeps the larger size, a deleted one leaves the listing (its tombstone is kept
    only when the older record does not list it)."""
    if old is None:
        return new
    files = dict(old.files)
    for name, (size, deleted) in new.files.items():
        before = files.get(name)
        if before is None or (deleted and before[1]):
            files[name] = (size, deleted)
        elif deleted:
            del files[name]
        else:
            files[name] = (max(size, before[0]), False)
    return FilesRecord(new.kind, files)


def merge(records: Iterable[tuple[str, FilesRecord | None]]) -> dict[str, FilesRecord]:
    """Records of the ``files`` partition by key, merged in order (a base file's first,
    then each log block's); None deletes the key (a DELETE block)."""
    merged: dict[str, FilesRecord] = {}
    for key, record in records:
        if record is None:
            merged.pop(key, None)
        else:
            merged[key] = combine(merged.get(key), record)
    return merged


def listing(merged: Mapping[str, FilesRecord]) -> dict[str, dict[str, int]]:
    """Partition path -> file name -> size, as Hudi's readers list them: the partitions
    the partition list names, each with the files its record lists and does not delete."""
    partitions = merged.get(ALL_PARTITIONS, FilesRecord(1, {}))
    result: dict[str, dict[str, int]] = {}
    for key, (_, deleted) in sorted(partitions.files.items()):
        if not deleted:
            files = merged.get(key, FilesRecord(2, {})).files
            result["" if key == NON_PARTITIONED else key] = {n: s for n, (s, d) in files.items() if not d}
    return result


# == reading the files file group ========================================================


def _decoded(cells: Iterable[tuple[bytes, bytes]], schema: Mapping[str, Any], where: str) -> list[tuple[str, FilesRecord]]:
    parsed = fastavro.parse_schema(dict(schema))
    records = []
    for key, value in cells:
        try:
            record = fastavro.schemaless_reader(BytesIO(value), parsed)
        except Exception as e:  # noqa: BLE001 - any decoding failure is a corrupt record
            raise CorruptFileError(where, 0, f"metadata record {key!r} does not decode: {e}") from e
        entries = record.get("filesystemMetadata") or {}
        records.append((key.decode(), FilesRecord(record["type"], {
            name: (info["size"], info["isDeleted"]) for name, info in entries.items()})))
    return records


def _base_records(io: FileIO, path: str) -> list[tuple[str, FilesRecord]]:
    cells, info = read_hfile(io.read_bytes(path), path)
    if "schema" not in info:
        raise CorruptFileError(path, 0, "metadata-table base file without a schema in its file info")
    return _decoded(cells, json.loads(info["schema"]), path)


def _log_records(io: FileIO, path: str, valid: Callable[[str], bool]) -> list[tuple[str, FilesRecord | None]]:
    """Records of the blocks of valid instants in one log file, in order."""
    records: list[tuple[str, FilesRecord | None]] = []
    for block in iter_blocks(io.read_bytes(path), path):
        if block.block_type == BlockType.CORRUPT or not valid(block.instant_time or ""):
            continue
        if block.block_type == BlockType.HFILE_DATA:
            cells, _ = read_hfile(bytes(block.content), block.where)
            records.extend(_decoded(cells, block.schema or {}, block.where))
        elif block.block_type == BlockType.DELETE:
            records.extend((key, None) for key in read_delete_block(block).column("record_key").to_pylist())
        else:
            raise CorruptFileError(path, block.offset, f"a {block.block_type.name} block in the metadata table's "
                                   "files partition, which memtier does not merge")
    return records


def _valid_instants(mdt_timeline: Timeline, data_timeline: Timeline) -> Callable[[str], bool]:
    """Hudi's rule for metadata-table blocks (``getValidInstantTimestamps``): a completed
    metadata deltacommit whose data instant is not pending."""
    pending = {i.timestamp for i in data_timeline.pending(None)}
    completed = {i.timestamp for i in mdt_timeline.completed(("deltacommit",))}
    return lambda instant: instant in completed and instant not in pending


def _latest_slice(io: FileIO, mdt: str, mdt_timeline: Timeline) -> FileSlice | None:
    """The latest slice of ``files-0000-0`` (a pending compaction's extends the one before)."""
    view = FileSystemView.build(io, mdt, mdt_timeline, partition_filter=lambda p: p == FILES)
    return view.latest_slice(FILES, FILE_ID)


def _slice_records(io: FileIO, mdt: str, base_file: str | None, log_files: Iterable[str],
                   valid: Callable[[str], bool]) -> list[tuple[str, FilesRecord | None]]:
    records: list[tuple[str, FilesRecord | None]] = []
    if base_file is not None:
        records.extend(_base_records(io, join(mdt, FILES, base_file)))
    for name in log_files:
        records.extend(_log_records(io, join(mdt, FILES, name), valid))
    return records


def read_files_partition(io: FileIO, base_path: str, data_timeline: Timeline) -> dict[str, dict[str, int]]:
    """The file listing Hudi's readers take from the metadata table (:func:`listing`):
    the latest slice of its ``files`` file group, base file and valid log blocks merged."""
    mdt = metadata_table_path(base_path)
    mdt_timeline = Timeline.load(io, mdt, METADATA_LAYOUT)
    latest = _latest_slice(io, mdt, mdt_timeline)
    if latest is None:
        return {}
    base = latest.base_file.name if latest.base_file else None
    logs = [f.name for f in latest.log_files]
    return listing(merge(_slice_records(io, mdt, base, logs, _valid_instants(mdt_timeline, data_timeline))))


# == compacting ==========================================================================


def deltacommits_since_base(mdt_timeline: Timeline) -> int:
    """Completed deltacommits of the metadata table after its last compaction (Hudi's
    count against ``hoodie.metadata.compact.max.delta.commits``)."""
    compactions = mdt_timeline.completed(("commit",))
    last = compactions[-1].timestamp if compactions else ""
    return sum(1 for i in mdt_timeline.completed(("deltacommit",)) if i.timestamp > last)


def compaction_time(mdt_timeline: Timeline, data_timeline: Timeline, new_time: Callable[[str], str]) -> str:
    """Hudi 1.x's instant time for a compaction of the metadata table: 1 ms before the
    earliest data instant that is pending but completed on the metadata table, else a new
    one (``new_time(after)``: later than ``after``, the metadata table's last instant or
    completion time, so every log file completed so far is in the plan)."""
    done = {i.timestamp for i in mdt_timeline.completed(("deltacommit",))}
    stuck = sorted(i.timestamp for i in data_timeline.pending(None) if i.timestamp in done)
    if stuck:
        before = parse_instant_time(stuck[0]) - timedelta(milliseconds=1)
        return new_instant_time(None, lambda: before)
    times = [t for i in mdt_timeline.instants for t in (i.timestamp, i.completion_time) if t]
    return new_time(max(times, default=""))


def _plan(io: FileIO, mdt: str, mdt_timeline: Timeline, instant: str) -> CompactionPlan | None:
    """The latest slice of ``files-0000-0`` with the log files whose deltacommit completed
    before ``instant``; None when it has none."""
    latest = _latest_slice(io, mdt, mdt_timeline)
    if latest is None:
        return None
    completions = {i.timestamp: i.completion_time for i in mdt_timeline.completed(("deltacommit",))}
    logs = [f.name for f in latest.log_files if (completions.get(f.base_instant) or instant) < instant]
    if not logs:
        return None
    operation = CompactionOperation(FILES, FILE_ID, latest.base_instant,
                                    latest.base_file.name if latest.base_file else None, tuple(logs),
                                    {"TOTAL_LOG_FILES": float(len(logs))})
    return CompactionPlan((operation,))


def _execute(io: FileIO, base_path: str, data_timeline: Timeline, instant: str, plan: CompactionPlan) -> bytes:
    """Write the plan's base file (replacing one a dead attempt left); the commit metadata."""
    if [(op.partition_path, op.file_id) for op in plan.operations] != [(FILES, FILE_ID)]:
        raise CorruptFileError(metadata_table_path(base_path), 0,
                               f"metadata-table compaction {instant} plans other file groups than {FILE_ID}")
    [op] = plan.operations
    mdt = metadata_table_path(base_path)
    mdt_timeline = Timeline.load(io, mdt, METADATA_LAYOUT)
    records = _slice_records(io, mdt, op.base_file, op.log_files, _valid_instants(mdt_timeline, data_timeline))
    schema = table_record_schema(io, mdt, mdt_timeline)
    cells = FilesChange(listing(merge(records))).records(schema)
    keys = sorted(key for key, _ in cells)
    data = write_hfile(cells, {"schema": json.dumps(schema, separators=(",", ":")).encode(),
                               "minRecordKey": keys[0], "maxRecordKey": keys[-1]})
    name = BaseFile(FILE_ID, WRITE_TOKEN, instant, "hfile").name
    path = join(mdt, FILES, name)
    if io.exists(path):
        io.delete(path)
    io.create_exclusive(path, data)
    failpoints.hit(failpoints.MDT_COMPACTION_WRITTEN)
    stat = WriteStat(
        file_id=FILE_ID, path=f"{FILES}/{name}", partition_path=FILES, prev_commit=op.base_instant,
        num_writes=len(cells), num_inserts=0, num_update_writes=len(cells), num_deletes=0,
        total_write_bytes=len(data), file_size=len(data), total_log_records=len(records),
        total_log_files_compacted=len(op.log_files),
    )
    return CommitMetadata({FILES: (stat,)}, schema_metadata(schema), "COMPACT", compacted=True).encode(METADATA_LAYOUT)


def _finish(io: FileIO, base_path: str, data_timeline: Timeline, pending: Instant) -> None:
    """Run a requested or inflight compaction of the metadata table from its plan, and
    complete it."""
    mdt = metadata_table_path(base_path)
    writer = TimelineWriter(io, mdt, METADATA_LAYOUT)
    requested = pending.with_state(State.REQUESTED)
    plan = CompactionPlan.from_avro(io.read_bytes(join(writer.folder, requested.file_name(METADATA_LAYOUT))))
    inflight = writer.inflight(pending) if pending.state is State.REQUESTED else pending
    content = _execute(io, base_path, data_timeline, pending.timestamp, plan)
    writer.complete(inflight, content)


def compact_files_partition(io: FileIO, base_path: str, data_timeline: Timeline, new_time: Callable[[str], str],
                            max_delta_commits: int = DEFAULT_MAX_DELTA_COMMITS) -> str | None:
    """Finish a pending compaction of the metadata table's ``files`` partition, or compact
    it anew once ``max_delta_commits`` deltacommits completed since its last one; the
    instant completed, or None. The caller holds the locks every writer of the metadata
    table takes; ``new_time(after)`` makes an instant time later than ``after`` and than
    every instant of the table so far."""
    mdt = metadata_table_path(base_path)
    mdt_timeline = Timeline.load(io, mdt, METADATA_LAYOUT)
    pending = mdt_timeline.pending(("compaction",))
    for instant in pending:
        _finish(io, base_path, data_timeline, instant)
        log.info("metadata table of %s: finished the compaction %s a dead attempt left", base_path, instant.timestamp)
    if pending:
        return pending[-1].timestamp
    if deltacommits_since_base(mdt_timeline) < max_delta_commits:
        return None
    instant = compaction_time(mdt_timeline, data_timeline, new_time)
    if any(i.timestamp == instant for i in mdt_timeline.instants):
        return None  # compacted at this time already (Hudi skips it too)
    plan = _plan(io, mdt, mdt_timeline, instant)
    if plan is None:
        return None
    requested = TimelineWriter(io, mdt, METADATA_LAYOUT).request(instant, "compaction", plan.to_avro())
    failpoints.hit(failpoints.MDT_COMPACTION_REQUESTED)
    _finish(io, base_path, data_timeline, requested)
    log.info("metadata table of %s: compacted %d log files into %s", base_path,
             len(plan.operations[0].log_files), instant)
    return instant
