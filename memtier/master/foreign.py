"""Conflicts of the master's instants with instants other writers (Apache Hudi's, under
optimistic concurrency control) put on a table's timeline.

The master's :class:`~memtier.master.commits.CommitLog` knows only the instants begun
through it; a Hudi writer's completed instants are on the timeline. When one of the
master's instants began, it noted the timeline (:class:`TimelineMark`); at its completion,
under the table lock Hudi shares, the commit-type instants that completed since and that
the master did not complete itself are read, and one that wrote a file group the instant
writes is a conflict, by Hudi's rule (``SimpleConcurrentFileWritesConflictResolutionStrategy``:
any two writes of one file group, except a log write against a compaction).

Hudi's own check (1.0.x and 1.1.x) considers only the instants requested after the
last instant completed when its writer began, so it would miss one of the master's
instants requested earlier than that and completed while the Hudi writer ran:
:func:`missed_by` refuses to complete such an instant while a live Hudi writer is pending.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from memtier.hudi.tablemeta import TableMeta
from memtier.hudi.timeline import COMMIT_ACTIONS, Instant, Timeline
from memtier.master.commits import (
    FileGroupRef,
    TimelineMark,
    can_conflict,
    describe_write,
    written_file_groups,
)

__all__ = ["WRITE_ACTIONS", "foreign_conflicts", "missed_by"]

#: The master's actions that write file groups (a clean or a schema change writes none).
WRITE_ACTIONS = frozenset({"deltacommit", "commit", "compaction", "replacecommit", "clustering"})
#: Actions of a plan whose instant later completes as a commit-type instant.
_PLANNED = ("compaction", "clustering", "logcompaction")


def _action_of(timeline: Timeline, done: Instant) -> str:
    """The action a completed instant stands for (a compaction completes as a commit)."""
    planned = {i.action for i in timeline.instants if i.timestamp == done.timestamp and i.action in _PLANNED}
    return next(iter(planned), done.action)


def foreign_conflicts(
    meta: TableMeta, timeline: Timeline, instant: str, action: str, mark: TimelineMark,
    file_groups: Collection[FileGroupRef], ours: Callable[[str], bool],
) -> list[str]:
    """Descriptions of the instants no writer of ``ours`` completed since ``mark`` that
    wrote one of ``file_groups`` and conflict with ``action``."""
    found = []
    for done in timeline.completed(COMMIT_ACTIONS):
        if done.timestamp == instant or not mark.after(done) or ours(done.timestamp):
            continue
        other = _action_of(timeline, done)
        if not can_conflict(action, other):
            continue
        written = written_file_groups(timeline.read_commit_metadata(meta.io, meta.base_path, done).write_stats())
        shared = written & set(file_groups)
        if shared:
            found.append(describe_write(done.timestamp, other, "another writer (Hudi's)", shared))
    return found


def missed_by(timeline: Timeline, instant: str, live_writers: Iterable[str]) -> str | None:
    """Why completing ``instant`` now could escape the conflict check of a live Hudi
    writer (one of ``live_writers``, pending instants of other writers): an instant
    requested after it has completed already, so a Hudi writer that began since checks
    only instants requested after that one. None when it cannot."""
    writers = sorted(live_writers)
    last = timeline.last_completed()
    if not writers or last is None or last.timestamp < instant:
        return None
    return (f"{last.action} {last.timestamp}, requested after it, completed first, and Hudi's writer of "
            f"{', '.join(writers)} checks only instants requested after the last one completed when it began")
