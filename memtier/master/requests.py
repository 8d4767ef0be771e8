"""Manual table-service calls (``client.compact`` and its like) on the master: a request
stands for the work there was to do when it was made, whoever plans it. Pure bookkeeping,
no I/O (:mod:`memtier.master.services` advances requests under its own lock).

What a request covers, and when it is done:

* compaction: every file slice that had log files when the request was made. A file
  group is done once it has a completed base file newer than the base instant of the
  newest of those log files (a compaction that took them: in Hudi's layout a log file
  written after compaction C was planned belongs to the slice C opens, so no compaction
  planned before C took it), or once a clustering replaced it. The request plans what no
  pending instant holds and joins the compactions (or clusterings) already pending on
  the rest; file groups a write in progress holds are planned once it is over.
* clustering: each partition in scope with file groups; done once a clustering the
  request planned itself has rewritten it (a pending one is waited for, then the
  partition is planned with the request's sort columns).
* clean: done once a clean the request planned itself completed, or there was nothing
  (more) to clean (a pending clean is waited for first: it was planned before the call).

Tasks the request did not plan (pending when it was made, or since) are reported as
joined.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memtier.hudi.fsview import FileSystemView
from memtier.master.commits import FileGroupRef
from memtier.master.tasks import COMPLETED, FAILED, RUNNING, Task

__all__ = ["Request", "compacted", "compaction_targets"]


@dataclass
class Request:
    """One manual call of a table service and the tasks that do its work."""

    request_id: int
    table: str
    kind: str
    #: compaction: file group -> base instant of its newest log file when requested
    file_groups: dict[FileGroupRef, str] = field(default_factory=dict)
    #: clustering: the partitions in scope, and the sort columns asked for
    partitions: tuple[str, ...] = ()
    sort_columns: tuple[str, ...] = ()
    task_ids: list[int] = field(default_factory=list)
    joined: set[int] = field(default_factory=set)
    state: str = RUNNING
    error: str | None = None

    def add(self, task: Task, *, joined: bool) -> None:
        """``task`` does (part of) the request's work: planned by it, or ``joined``."""
        if task.task_id in self.task_ids:
            return
        self.task_ids.append(task.task_id)
        if joined:
            self.joined.add(task.task_id)

    def fail(self, error: str) -> None:
        self.state, self.error = FAILED, error

    def complete(self) -> None:
        self.state = COMPLETED

    def to_dict(self, tasks: Mapping[int, Task]) -> dict[str, Any]:
        """The request as callers see it: each task with ``joined`` saying whether the
        request planned it itself."""
        return {
            "request_id": self.request_id, "table": self.table, "kind": self.kind, "state": self.state,
            "error": self.error, "file_groups": len(self.file_groups), "partitions": list(self.partitions),
            "tasks": [{**tasks[i].to_dict(), "joined": i in self.joined} for i in self.task_ids if i in tasks],
        }


def compaction_targets(view: FileSystemView) -> dict[FileGroupRef, str]:
    """File group -> base instant of the newest log file of its latest slice, for every
    file group whose latest slice has log files."""
    return {key: max(log.base_instant for log in group.latest.log_files)
            for key, group in view.file_groups.items() if group.latest.log_files}


def compacted(view: FileSystemView, group: FileGroupRef, since: str) -> bool:
    """Whether the log files of ``group`` whose base instant is at most ``since`` are in a
    base file now: a completed base file newer than ``since``, or the group replaced
    (or gone)."""
    found = view.file_groups.get(group)
    if found is None or group in view.replaced:
        return True
    return any(s.base_file is not None and s.base_instant > since for s in found.slices)
