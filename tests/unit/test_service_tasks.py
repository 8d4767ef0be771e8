"""The master's table-service bookkeeping: the task queue (priority, holds, give-back),
read leases, and which actions conflict on a file group."""

from __future__ import annotations

from memtier.master.commits import CommitLog, can_conflict
from memtier.master.tasks import Leases, TaskQueue, priority


def test_tasks_go_out_by_priority_then_age_and_an_urgent_compaction_first() -> None:
    queue = TaskQueue()
    clean = queue.add("t", "clean", "001", priority("clean"), 0.0)
    compaction = queue.add("t", "compaction", "002", priority("compaction"), 0.0)
    urgent = queue.add("u", "compaction", "003", priority("compaction", urgent=True), 0.0)
    taken = [queue.take("w", 0.0, 10.0) for _ in range(3)]
    assert [t.task_id for t in taken] == [urgent.task_id, compaction.task_id, clean.task_id]
    assert queue.take("w", 0.0, 10.0) is None


def test_a_held_task_expires_unless_renewed_and_only_its_holder_renews_it() -> None:
    queue = TaskQueue()
    task = queue.add("t", "compaction", "001", 1, 0.0)
    queue.take("w1", now=0.0, timeout=5.0)
    assert not queue.renew(task.task_id, "w2", now=1.0, timeout=5.0, done=1, total=2)
    assert queue.renew(task.task_id, "w1", now=4.0, timeout=5.0, done=1, total=2)
    assert queue.expired(now=8.0) == []
    assert queue.expired(now=9.5) == [task]
    assert queue.held_by("w1") == [task]
    queue.requeue(task.task_id, "w1 went silent")
    again = queue.take("w2", now=10.0, timeout=5.0)
    assert again is task and task.attempts == 2 and task.worker == "w2"
    queue.finish(task.task_id)
    assert queue.get(task.task_id).state == "completed" and queue.active() == []


def test_raising_a_tables_compaction_priority_moves_it_ahead() -> None:
    queue = TaskQueue()
    queue.add("t", "clean", "001", priority("clean"), 0.0)
    late = queue.add("t", "compaction", "002", 5, 0.0)
    queue.raise_priority("t", "compaction", 0)
    assert queue.take("w", 0.0, 1.0) is late


def test_leases_pin_instants_until_released_or_expired() -> None:
    leases = Leases()
    first = leases.take("t", "001", now=0.0, timeout=10.0)
    leases.take("t", "002", now=5.0, timeout=10.0)
    leases.take("u", "009", now=0.0, timeout=10.0)
    assert leases.instants("t", now=1.0) == ["001", "002"]
    leases.release(first)
    assert leases.instants("t", now=1.0) == ["002"]
    assert leases.instants("t", now=16.0) == []
    assert leases.count("t") == 0


def test_a_log_write_and_a_compaction_never_conflict_but_a_clustering_does() -> None:
    assert not can_conflict("deltacommit", "compaction")
    assert can_conflict("deltacommit", "replacecommit")
    log = CommitLog()
    log.begin("001", "compaction", "svc", [("p", "a")])
    log.begin("002", "deltacommit", "ts-0", [("p", "a")])
    assert log.conflicts("002", []) == []
    log.begin("003", "replacecommit", "svc", [("p", "a")])
    assert log.conflicts("002", [], ["replacecommit"]) == ["replacecommit 003 by svc wrote file groups p/a (pending)"]
    assert set(log.pending_file_groups()) == {("p", "a")}


def test_a_pending_write_makes_busy_every_file_group_of_its_buckets() -> None:
    """A flush names the file group its blocks were written to and writes into the one
    holding their bucket now when a clustering replaced it: both are busy for planners."""
    log = CommitLog()
    log.begin("001", "deltacommit", "ts-0", [("p", "00000003-0000-0000-0000-000000000000-0"), ("p", "a")])
    busy = log.pending_file_groups()
    assert ("p", "00000003-6a78-43b7-9eec-451f3b9c9601-0") in busy  # the bucket's file group since
    assert ("p", "a") in busy
    assert ("p", "00000004-0000-0000-0000-000000000000-0") not in busy  # another bucket
    assert ("q", "00000003-0000-0000-0000-000000000000-0") not in busy  # another partition
    assert ("p", "b") not in busy
