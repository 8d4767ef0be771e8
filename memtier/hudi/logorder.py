"""Log files in completion order: the names a log write's files take when it completes.

Readers of table version 6 (memtier's, hudi-rs, Apache Hudi on Spark) read a file slice's
log files in the order of their versions (then write tokens), and of two records of one
key with equal ordering values keep the one read later. Several writers append log files
to one file group at once (the write tier's flushes, Spark backfills), so a log file's
place is settled when its commit completes, under the master's commit lock, as Hudi 1.x's
non-blocking concurrency control orders log files by completion time:

* a pending log file (:class:`~memtier.hudi.filenames.PendingLogFile`, a backfill's)
  becomes a log file of the slice a log file written now joins (the one a pending
  compaction opens, if any, so a compaction planned meanwhile never misses it; a new,
  log-only file group if there is none yet), at a version above every log file of that
  slice, listed or named by another pending commit;
* a log file named when it was planned (a flush's) keeps its name, unless a log file
  completed since into its slice has a version not below its own: then it is renamed
  above every other.

So in every slice log versions follow completion order, and every reader breaks ties of
ordering values by completion. Renaming rewrites the commit's inflight first, naming the
files under both names, so that a rollback after a crash midway deletes whichever exists.

On timeline layout 2 (table versions 8 and 9) a log file is named by its own deltacommit
and joins a slice by that deltacommit's completion time (:mod:`memtier.hudi.fsview`), as
in Hudi 1.x: a pending log file takes its instant's name (the next version of that
instant in its file group) and nothing is reordered; readers order a slice's log files by
instant, so ties of ordering values go to the later instant, as in every Hudi 1.x reader.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from memtier.errors import InvalidArgumentError, NotFoundError
from memtier.hudi.commit import NULL_COMMIT, CommitMetadata, WriteStat
from memtier.hudi.filenames import LogFile, PendingLogFile, classify
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.logfilters import rename_log_filters
from memtier.hudi.tablemeta import TableMeta
from memtier.hudi.timeline import Instant, State, Timeline
from memtier.io import basename, join

__all__ = ["Rename", "apply_renames", "has_pending_logs", "place_log_files", "planned_log_files"]

#: A file group: (partition path, file id).
Group = tuple[str, str]


@dataclass(frozen=True)
class Rename:
    """One file of a commit renamed in its partition."""

    partition: str
    old: str
    new: str


def has_pending_logs(stats: Iterable[WriteStat]) -> bool:
    """Whether any of a commit's files is a pending log file (named at completion)."""
    return any(PendingLogFile.parse(basename(s.path)) is not None for s in stats)


def planned_log_files(meta: TableMeta, timeline: Timeline, instant: str) -> dict[Group, list[LogFile]]:
    """The log files the inflights of the table's other pending deltacommits name (files
    they may not have written yet), by file group."""
    found: dict[Group, list[LogFile]] = {}
    for pending in timeline.pending(("deltacommit",)):
        if pending.timestamp == instant or pending.state is not State.INFLIGHT:
            continue
        try:
            content = meta.io.read_bytes(timeline.instant_path(meta.base_path, pending))
            metadata = CommitMetadata.decode(content)
        except (NotFoundError, InvalidArgumentError):
            continue  # completed or rolled back since it was listed, or no names in it
        for stat in (s for stats in metadata.partition_to_write_stats.values() for s in stats):
            named = classify(basename(stat.path))
            if isinstance(named, LogFile):
                found.setdefault((stat.partition_path, stat.file_id), []).append(named)
    return found


def place_log_files(
    view: FileSystemView, stats: Sequence[WriteStat], instant: str, *,
    planned: Mapping[Group, Collection[LogFile]], reorder: Collection[Group], layout: int = 1,
) -> tuple[list[WriteStat], list[Rename]]:
    """The stats of ``instant``'s files with the names they complete under, and the
    renames that takes. ``view`` lists the table now; ``planned`` are the log files other
    pending commits name; ``reorder`` the file groups another log write completed into
    since ``instant`` began (its planned log files there may have to move up; never on
    timeline ``layout`` 2, where log files are named by their instant)."""
    taken: dict[tuple[Group, str], int] = {}  # versions given out by this call

    def next_version(group: Group, base_instant: str, own: str | None = None) -> int:
        others = [f.version for f in _logs(view, group, planned) if f.base_instant == base_instant and f.name != own]
        version = max([*others, taken.get((group, base_instant), 0)], default=0) + 1
        taken[(group, base_instant)] = version
        return version

    placed: list[WriteStat] = []
    renames: list[Rename] = []
    for stat in sorted(stats, key=lambda s: (s.partition_path, s.file_id, s.path)):
        group = (stat.partition_path, stat.file_id)
        name = basename(stat.path)
        pending = PendingLogFile.parse(name)
        if pending is not None:
            slice_ = view.slice_for_write(*group)
            named_by = slice_.base_instant if slice_ is not None and layout == 1 else instant
            log = pending.as_log(named_by, next_version(group, named_by))
            base_file = slice_.base_file.name if slice_ is not None and slice_.base_file is not None else None
            prev = NULL_COMMIT if slice_ is None or slice_.is_empty else slice_.base_instant
            placed.append(_renamed(stat, log, base_file=base_file, prev_commit=prev))
            renames.append(Rename(stat.partition_path, name, log.name))
        elif layout == 1 and stat.is_log_write and group in reorder and _overtaken(view, group, LogFile.parse(name), planned):
            log = LogFile.parse(name)
            moved = dataclasses.replace(log, version=next_version(group, log.base_instant, own=name))
            placed.append(_renamed(stat, moved))
            renames.append(Rename(stat.partition_path, name, moved.name))
        else:
            placed.append(stat)
    return placed, renames


def _logs(view: FileSystemView, group: Group, planned: Mapping[Group, Collection[LogFile]]) -> set[LogFile]:
    """Every log file of ``group``: listed, or named by a pending commit."""
    found = view.file_groups.get(group)
    listed = {f for s in found.slices for f in s.log_files} if found is not None else set()
    return listed | set(view.pending_logs.get(group, ())) | set(planned.get(group, ()))


def _overtaken(view: FileSystemView, group: Group, log: LogFile, planned: Mapping[Group, Collection[LogFile]]) -> bool:
    """Whether a log file of ``log``'s slice that no pending commit names (one completed)
    has a version not below ``log``'s."""
    pending = set(planned.get(group, ()))
    return any(f.base_instant == log.base_instant and f.name != log.name and f not in pending
               and f.version >= log.version for f in _logs(view, group, {}))


def _renamed(stat: WriteStat, log: LogFile, **changes: str | None) -> WriteStat:
    return dataclasses.replace(stat, path=join(stat.partition_path, log.name), log_version=log.version,
                               log_offset=0, log_files=(log.name,), **changes)


def apply_renames(meta: TableMeta, instant: str, action: str, metadata: CommitMetadata,
                  placed: Sequence[WriteStat], renames: Sequence[Rename]) -> None:
    """Rename the files durably: the inflight first names them under both names (a
    rollback deletes whichever exists), then each file, then their key filters."""
    if not renames:
        return
    skeleton = metadata.with_stats([*metadata.write_stats(), *placed])
    meta.timeline_writer().replace_inflight(Instant(instant, action, State.INFLIGHT),
                                            skeleton.encode(meta.layout))
    for r in renames:
        meta.io.rename(join(meta.base_path, r.partition, r.old), join(meta.base_path, r.partition, r.new))
    rename_log_filters(meta, instant, {join(r.partition, r.old): join(r.partition, r.new) for r in renames})
