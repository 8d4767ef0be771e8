"""Bookkeeping of the table services on the master: the task queue the pool takes work
from, and the leases of reads in progress. Pure Python, no I/O, not thread-safe (the
master calls it under its lock).

A task is one planned instant (a compaction, clustering or clean already requested on the
timeline) waiting for, or held by, a pool actor. An actor holds a task for
``timeout`` seconds and renews that by reporting progress; a task whose holder went
silent is given back (the master first undoes what the attempt wrote). Tasks go out by
priority (lower first), then age: compactions of a table deep in debt before anything else.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

__all__ = ["Leases", "Task", "TaskQueue", "priority"]

_PRIORITY = {"compaction": 1, "clustering": 2, "clean": 3}
URGENT = 0
QUEUED, RUNNING, COMPLETED, FAILED = "queued", "running", "completed", "failed"
_KEEP_FINISHED = 256


def priority(kind: str, *, urgent: bool = False) -> int:
    """A task's priority: an urgent compaction (its table's debt past the limit) first."""
    return URGENT if urgent and kind == "compaction" else _PRIORITY[kind]


@dataclass
class Task:
    """One table-service instant to execute."""

    task_id: int
    table: str
    kind: str
    instant: str
    priority: int
    created: float
    file_groups: int = 0
    state: str = QUEUED
    worker: str | None = None
    deadline: float = 0.0
    done: int = 0
    total: int = 0
    attempts: int = 0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id, "table": self.table, "kind": self.kind, "instant": self.instant,
            "priority": self.priority, "state": self.state, "worker": self.worker, "done": self.done,
            "total": self.total, "attempts": self.attempts, "error": self.error,
            "file_groups": self.file_groups,
        }


class TaskQueue:
    """Tasks waiting or running, and the outcome of recently finished ones."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._active: dict[int, Task] = {}
        self._finished: dict[int, Task] = {}

    def add(self, table: str, kind: str, instant: str, prio: int, now: float, file_groups: int = 0) -> Task:
        task = Task(next(self._ids), table, kind, instant, prio, now, file_groups)
        self._active[task.task_id] = task
        return task

    def get(self, task_id: int) -> Task | None:
        return self._active.get(task_id) or self._finished.get(task_id)

    def of_instant(self, table: str, instant: str) -> Task | None:
        """The task (active, else recently finished) executing ``instant`` of ``table``."""
        for tasks in (self._active, self._finished):
            found = [t for t in tasks.values() if t.table == table and t.instant == instant]
            if found:
                return found[-1]
        return None

    def active(self, table: str | None = None, kind: str | None = None) -> list[Task]:
        """Queued and running tasks, in the order they go out."""
        tasks = [t for t in self._active.values()
                 if (table is None or t.table == table) and (kind is None or t.kind == kind)]
        return sorted(tasks, key=lambda t: (t.state != RUNNING, t.priority, t.task_id))

    def take(self, worker: str, now: float, timeout: float) -> Task | None:
        """The next queued task, now held by ``worker`` until ``now + timeout``."""
        queued = [t for t in self._active.values() if t.state == QUEUED]
        if not queued:
            return None
        task = min(queued, key=lambda t: (t.priority, t.task_id))
        task.state, task.worker, task.deadline = RUNNING, worker, now + timeout
        task.attempts += 1
        task.done = task.total = 0
        return task

    def renew(self, task_id: int, worker: str, now: float, timeout: float, done: int, total: int) -> bool:
        """``worker`` is still at it; False when the task is no longer its own."""
        task = self._active.get(task_id)
        if task is None or task.state != RUNNING or task.worker != worker:
            return False
        task.deadline, task.done, task.total = now + timeout, done, total
        return True

    def finish(self, task_id: int, error: str | None = None) -> Task | None:
        task = self._active.pop(task_id, None)
        if task is None:
            return None
        task.state, task.error, task.worker = (FAILED if error else COMPLETED), error, None
        self._finished[task_id] = task
        while len(self._finished) > _KEEP_FINISHED:
            del self._finished[next(iter(self._finished))]
        return task

    def requeue(self, task_id: int, error: str | None = None) -> None:
        task = self._active[task_id]
        task.state, task.worker, task.deadline, task.error = QUEUED, None, 0.0, error

    def expired(self, now: float) -> list[Task]:
        return [t for t in self._active.values() if t.state == RUNNING and t.deadline < now]

    def held_by(self, worker: str) -> list[Task]:
        return [t for t in self._active.values() if t.state == RUNNING and t.worker == worker]

    def raise_priority(self, table: str, kind: str, prio: int) -> None:
        for task in self._active.values():
            if task.table == table and task.kind == kind:
                task.priority = min(task.priority, prio)

    def forget_table(self, table: str) -> None:
        for task_id in [i for i, t in self._active.items() if t.table == table]:
            del self._active[task_id]


class Leases:
    """Reads in progress: each lease pins the instant a read reads at, so that cleaning
    keeps the file slices it needs until the read ends or the lease expires."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._leases: dict[int, tuple[str, str, float]] = {}  # id -> (table, instant, expires)

    def take(self, table: str, instant: str, now: float, timeout: float) -> int:
        lease = next(self._ids)
        self._leases[lease] = (table, instant, now + timeout)
        return lease

    def release(self, lease: int) -> None:
        self._leases.pop(lease, None)

    def instants(self, table: str, now: float) -> list[str]:
        """The instants leased on ``table`` (expired leases are dropped)."""
        for lease in [i for i, (_, _, expires) in self._leases.items() if expires < now]:
            del self._leases[lease]
        return sorted({instant for t, instant, _ in self._leases.values() if t == table})

    def count(self, table: str) -> int:
        return sum(1 for t, _, _ in self._leases.values() if t == table)
