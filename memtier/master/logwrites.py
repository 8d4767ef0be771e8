"""Completing a log write (a deltacommit) on the master, under the table's commit lock.

Log writes into one file group (the write tier's flushes, Spark backfills) never conflict
with each other: their log files are put in completion order as they complete
(:mod:`memtier.hudi.logorder`), and every reader merges them by ordering value, ties going
to the later completion. What this takes, and what still conflicts:

* a deltacommit holding pending log files (a backfill's) lists the table and names them;
  one whose file groups another log write completed into since it began lists the table
  and renames its own log files there if they were overtaken; any other (a flush on its
  own) completes as planned, with no listing;
* a deltacommit that starts a file group with a base file (a flush's first write to it)
  conflicts with a log write that completed into that file group since it began, whose
  log-only slice the new base file would hide: it is rolled back, and the flush writes a
  log file into that slice next time.
"""

from __future__ import annotations

from collections.abc import Iterable

from memtier.hudi.commit import NULL_COMMIT, CommitMetadata
from memtier.hudi.filenames import BaseFile, classify
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.logorder import apply_renames, has_pending_logs, place_log_files, planned_log_files
from memtier.hudi.tablemeta import TableMeta
from memtier.io import basename
from memtier.master.commits import CommitLog, FileGroupRef, written_file_groups

__all__ = ["LOG_WRITE", "new_file_group_conflicts", "settle_log_files"]

#: The action of a log write.
LOG_WRITE = "deltacommit"


def new_file_group_conflicts(commits: CommitLog, instant: str, metadata: CommitMetadata) -> list[str]:
    """Descriptions of the log writes that completed, since ``instant`` began, into a
    file group it starts with a base file."""
    new = [(s.partition_path, s.file_id) for s in metadata.write_stats()
           if s.prev_commit == NULL_COMMIT and isinstance(classify(basename(s.path)), BaseFile)]
    if not new:
        return []
    return [d for found in commits.completed_since(instant, new, (LOG_WRITE,)).values() for d in found]


def settle_log_files(meta: TableMeta, commits: CommitLog, instant: str, metadata: CommitMetadata,
                     file_groups: Iterable[FileGroupRef] = ()) -> CommitMetadata:
    """``metadata`` of the log write ``instant`` with its log files under the names they
    complete under (renamed on disk already)."""
    stats = metadata.write_stats()
    groups = {*file_groups, *written_file_groups(stats)}
    moved = commits.completed_since(instant, groups, (LOG_WRITE,)) if meta.layout == 1 else {}
    if not moved and not has_pending_logs(stats):
        return metadata
    timeline = meta.timeline()
    view = FileSystemView.build(meta.io, meta.base_path, timeline)
    placed, renames = place_log_files(view, stats, instant, planned=planned_log_files(meta, timeline, instant),
                                      reorder=set(moved), layout=meta.layout)
    apply_renames(meta, instant, LOG_WRITE, metadata, placed, renames)
    return metadata.with_stats(placed)
