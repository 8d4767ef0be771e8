"""The master's side of the table services: it plans compactions, clusterings and cleans
(each requested on the timeline through the commit path, with its Hudi plan), hands them
to the pool's actors as tasks, completes what they report, and undoes what a failed or
silent actor left behind (a compaction goes back to requested and runs again).

Policies (:class:`~memtier.config.ServicesConfig`, per table overridable) decide what is
due; :meth:`TableServices.check` runs them periodically. Reads take leases here
(:meth:`TableServices.lease`) so that a clean never deletes a slice a read still uses.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memtier.compaction.clean import CleanPolicy, plan_clean
from memtier.compaction.cluster import plan_clustering
from memtier.compaction.compact import CompactionPolicy, SliceDebt, plan_compaction, slice_debt
from memtier.config import ServicesConfig, load
from memtier.errors import CommitFailedError, InvalidArgumentError, MemtierError
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.plans import CleanerPlan, ClusteringPlan, CompactionPlan
from memtier.hudi.tablemeta import TableMeta
from memtier.hudi.timeline import Instant, State
from memtier.master.tasks import ACTIONS, RUNNING, Leases, Task, TaskQueue, priority

if TYPE_CHECKING:
    from memtier.master.master import Master

__all__ = ["TableServices"]

log = logging.getLogger(__name__)

OWNER = "table-services"
#: Attempts after which a failing task stops being retried (until scheduled again).
_MAX_ATTEMPTS = 5


class TableServices:
    """Scheduling, tasks and leases of every table of one master; thread-safe."""

    def __init__(self, master: Master, options: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._master = master
        self._options = dict(options or {})
        self.config = load(ServicesConfig, self._options)
        self._clock = clock
        self._lock = threading.Lock()
        self._tasks = TaskQueue()
        self._leases = Leases()
        self._started = clock()
        self._last_check = 0.0
        self._last_clean: dict[str, float] = {}
        self._debt: dict[str, dict[str, int]] = {}
        self._workers: dict[str, str | None] = {}  # pool actor -> the CPUs it runs on

    def table_config(self, table: str) -> ServicesConfig:
        """The cluster's service settings overridden by the table's own."""
        return load(ServicesConfig, {**self._options, **self._master.service_overrides(table)})

    # == leases ==========================================================================
    def lease(self, table: str, instant: str | None) -> int | None:
        """A read of ``table`` at ``instant`` begins; its lease id (None: nothing to pin)."""
        if instant is None:
            return None
        timeout = self.table_config(table).lease_timeout.total_seconds()
        with self._lock:
            return self._leases.take(table, instant, self._clock(), timeout)

    def release(self, lease: int) -> None:
        with self._lock:
            self._leases.release(lease)

    # == scheduling ======================================================================
    def schedule(
        self, table: str, kind: str, *, force: bool = False, partitions: Sequence[str] | None = None,
        sort_columns: Sequence[str] = (),
    ) -> dict[str, Any] | None:
        """Plan a ``kind`` ("compaction", "clustering", "clean") of ``table`` and queue it;
        the task, or None when there is nothing to do. A manual compaction (``force``)
        takes every slice with log files; a clean or clustering already queued is
        returned instead of planning another."""
        if kind not in ACTIONS:
            raise InvalidArgumentError(f"a table service is one of {sorted(ACTIONS)}, not {kind!r}")
        if kind != "compaction":
            with self._lock:
                queued = self._tasks.active(table, kind)
            if queued:
                return queued[0].to_dict()
        config = self.table_config(table)
        meta = self._master.meta(table)
        if kind == "compaction" and not meta.is_merge_on_read:
            raise InvalidArgumentError(f"table {table} is copy-on-write: it has no log files to compact")

        def make_plan(busy: Collection[tuple[str, str]]) -> tuple[bytes, list[tuple[str, str]]] | None:
            if kind == "compaction":
                view = _view(meta)
                policy = CompactionPolicy(config.compaction_log_files, config.compaction_log_fraction)
                plan = plan_compaction(view, policy, busy=busy, force=force)
                return None if plan is None else (plan.to_avro(), plan.file_groups())
            if kind == "clustering":
                view = _view(meta)
                clustering = plan_clustering(meta, view, busy=busy, partitions=partitions,
                                             sort_columns=sort_columns, force=force)
                if clustering is None:
                    return None
                return clustering.to_avro(meta.base_path), clustering.file_groups()
            view = FileSystemView.build(meta.io, meta.base_path, meta.timeline(), keep_replaced=True)
            with self._lock:
                leased = self._leases.instants(table, self._clock())
            cleaning = plan_clean(view, CleanPolicy(config.clean_retain_versions), leased)
            return None if cleaning is None else (cleaning.to_avro(meta.base_path), [])

        begun = self._master.begin_planned(table, ACTIONS[kind], OWNER, make_plan)
        if begun is None:
            return None
        instant, file_groups = begun
        urgent = kind == "compaction" and self._debt.get(table, {}).get("log_bytes", 0) > config.compaction_debt_limit
        with self._lock:
            task = self._tasks.add(table, kind, instant, priority(kind, urgent=urgent), self._clock(),
                                   len(file_groups))
            if kind == "clean":
                self._last_clean[table] = self._clock()
        log.info("%s %s of %s planned (%d file groups)", kind, instant, table, len(file_groups))
        return task.to_dict()

    def recover(self, table: str, meta: TableMeta) -> None:
        """After a master (re)start: queue the table's pending compactions and cleans
        again (an inflight compaction goes back to requested first); pending clusterings
        are rolled back (their plans may no longer hold)."""
        timeline = meta.timeline()
        for pending in timeline.pending(tuple(ACTIONS.values())):
            kind = next(k for k, a in ACTIONS.items() if a == pending.action)
            requested = timeline.instant_path(meta.base_path, Instant(pending.timestamp, pending.action, State.REQUESTED))
            try:
                content = meta.io.read_bytes(requested)
                groups = _plan_file_groups(kind, content)
            except (MemtierError, OSError) as e:
                if kind == "compaction":
                    log.error("pending compaction %s of %s has no readable plan: %s", pending.timestamp, table, e)
                    continue
                groups = None  # not a clustering (an insert overwrite's request): roll it back
            if kind == "clustering" or groups is None:
                self._master.adopt_pending(table, pending.timestamp, pending.action, OWNER, [])
                self._master.abort_commit(table, pending.timestamp)
                continue
            if pending.state is State.INFLIGHT and kind == "compaction":
                self._master.revert_to_requested(table, pending.timestamp)
            self._master.adopt_pending(table, pending.timestamp, pending.action, OWNER, groups)
            with self._lock:
                self._tasks.add(table, kind, pending.timestamp, priority(kind), self._clock(), len(groups))

    def forget_table(self, table: str) -> None:
        with self._lock:
            self._tasks.forget_table(table)
            self._debt.pop(table, None)

    # == the pool's calls ================================================================
    def worker_started(self, worker: str, cpus: str | None = None) -> None:
        """A pool actor (re)started, on ``cpus``: whatever an earlier life of it held is
        given back."""
        with self._lock:
            self._workers[worker] = cpus
            held = self._tasks.held_by(worker)
        for task in held:
            self._give_back(task, f"actor {worker} restarted while running it")

    def next_task(self, worker: str) -> dict[str, Any] | None:
        """The next task for ``worker``, its instant moved to inflight; None if idle."""
        while True:
            with self._lock:
                task = self._tasks.take(worker, self._clock(), self.config.task_timeout.total_seconds())
            if task is None:
                return None
            try:
                self._master.start_pending(task.table, task.instant)
            except Exception as e:
                log.exception("could not start %s %s of %s", task.kind, task.instant, task.table)
                self._fail(task, f"could not be started: {e}")
                continue
            location = self._master.table_location(task.table)
            return {**task.to_dict(), "path": location.path, "storage_options": dict(location.storage_options)}

    def progress(self, task_id: int, worker: str, done: int, total: int) -> bool:
        """``worker`` reports progress (which renews its hold); False: stop, it is not
        yours any more."""
        with self._lock:
            return self._tasks.renew(task_id, worker, self._clock(), self.config.task_timeout.total_seconds(),
                                     done, total)

    def finish(self, task_id: int, worker: str, content: bytes | None, error: str | None = None,
               file_groups: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
        """``worker`` is done: with ``content`` the master completes the instant (a
        clustering is checked for conflicting writes first); with ``error`` the attempt
        is undone and the task queued again (up to a few attempts). The task afterwards."""
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None or task.state != RUNNING or task.worker != worker:
                raise CommitFailedError(f"task {task_id} is not held by {worker} (it timed out and was given back)")
        if error is None and content is not None:
            try:
                self._master.complete_commit(task.table, task.instant, content, file_groups=file_groups,
                                             check_conflicts=task.kind == "clustering")
            except CommitFailedError as e:  # rolled back already: writes raced the clustering
                with self._lock:
                    self._tasks.finish(task_id, str(e))
                return task.to_dict()
            with self._lock:
                self._tasks.finish(task_id)
            log.info("%s %s of %s completed by %s", task.kind, task.instant, task.table, worker)
            return task.to_dict()
        self._give_back(task, error or "no result")
        return task.to_dict()

    def task(self, task_id: int) -> dict[str, Any]:
        with self._lock:
            task = self._tasks.get(task_id)
        if task is None:
            raise InvalidArgumentError(f"no table-service task {task_id} (unknown, or finished long ago)")
        return task.to_dict()

    def _give_back(self, task: Task, reason: str) -> None:
        """Undo an attempt and queue the task again (a clustering is dropped instead)."""
        log.warning("%s %s of %s: attempt %d failed (%s)", task.kind, task.instant, task.table, task.attempts, reason)
        try:
            if task.kind == "compaction":
                self._master.revert_to_requested(task.table, task.instant)
            elif task.kind == "clustering":
                self._master.abort_commit(task.table, task.instant)
        except Exception:
            log.exception("could not undo %s %s of %s", task.kind, task.instant, task.table)
        with self._lock:
            if task.kind == "clustering" or task.attempts >= _MAX_ATTEMPTS:
                self._tasks.finish(task.task_id, reason)
            else:
                self._tasks.requeue(task.task_id, reason)

    def _fail(self, task: Task, reason: str) -> None:
        with self._lock:
            self._tasks.finish(task.task_id, reason)

    # == periodic work ===================================================================
    def check(self, tables: Sequence[str]) -> None:
        """Give back tasks of silent actors; measure compaction debt; plan what the
        policies say is due (at most every ``services.check-interval``)."""
        now = self._clock()
        with self._lock:
            expired = self._tasks.expired(now)
        for task in expired:
            self._give_back(task, f"actor {task.worker} went silent")
        if self.config.workers == 0:
            return  # no pool: a plan would stay pending forever (and hide rows from hudi-rs)
        if now - self._last_check < self.config.check_interval.total_seconds():
            return
        self._last_check = now
        for table in tables:
            try:
                self._check_table(table, now)
            except MemtierError:
                log.exception("table services of %s: checking failed", table)

    def _check_table(self, table: str, now: float) -> None:
        meta = self._master.meta(table)
        if not meta.is_merge_on_read:
            return
        config = self.table_config(table)
        view = _view(meta)
        debts = [slice_debt(view, g.latest) for g in view.file_groups.values()]
        debt = _total(debts)
        urgent = debt["log_bytes"] > config.compaction_debt_limit
        with self._lock:
            self._debt[table] = debt
            if urgent:
                self._tasks.raise_priority(table, "compaction", priority("compaction", urgent=True))
            queued = {t.kind for t in self._tasks.active(table)}
            last_clean = self._last_clean.setdefault(table, now)
        policy = CompactionPolicy(config.compaction_log_files, config.compaction_log_fraction)
        if any(policy.due(d) for d in debts) and "compaction" not in queued:
            self.schedule(table, "compaction")
        grace = now - self._started >= config.lease_timeout.total_seconds()
        if grace and "clean" not in queued and now - last_clean >= config.clean_interval.total_seconds():
            with self._lock:
                self._last_clean[table] = now
            self.schedule(table, "clean")

    # == status ==========================================================================
    def workers(self) -> dict[str, str | None]:
        """The pool's actors that have started, and the CPUs each runs on (None: unknown)."""
        with self._lock:
            return dict(sorted(self._workers.items()))

    def status(self, table: str) -> dict[str, Any]:
        """Pending and running services of the table, its compaction debt, its leases."""
        with self._lock:
            tasks = [t.to_dict() for t in self._tasks.active(table)]
            leases = self._leases.count(table)
            debt = dict(self._debt.get(table, {}))
        return {"tasks": tasks, "debt": debt, "leases": leases}

    def measure_debt(self, table: str) -> dict[str, int]:
        """Compaction debt now (log files and bytes in the latest slices)."""
        view = _view(self._master.meta(table))
        debt = _total([slice_debt(view, g.latest) for g in view.file_groups.values()])
        with self._lock:
            self._debt[table] = debt
        return debt


def _view(meta: TableMeta) -> FileSystemView:
    return FileSystemView.build(meta.io, meta.base_path, meta.timeline())


def _total(debts: Sequence[SliceDebt]) -> dict[str, int]:
    return {"log_files": sum(d.log_files for d in debts), "log_bytes": sum(d.log_bytes for d in debts),
            "file_groups": sum(1 for d in debts if d.log_files)}


def _plan_file_groups(kind: str, content: bytes) -> list[tuple[str, str]]:
    if kind == "compaction":
        return CompactionPlan.from_avro(content).file_groups()
    if kind == "clustering":
        return ClusteringPlan.from_avro(content).file_groups()
    CleanerPlan.from_avro(content)
    return []
