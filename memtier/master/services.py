"""The master's side of the table services: it plans compactions, clusterings and cleans
(each requested on the timeline through the commit path, with its Hudi plan), hands them
to the pool's actors as tasks, completes what they report, and undoes what a failed or
silent actor left behind (a compaction goes back to requested and runs again).

Policies (:class:`~memtier.config.ServicesConfig`, per table overridable) decide what is
due; :meth:`TableServices.check` runs them periodically. Manual calls are requests
(:mod:`memtier.master.requests`): each plans, or joins, whatever its work needs until it
is done. Reads take leases here (:meth:`TableServices.lease`) so that a clean never
deletes a slice a read still uses.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

from memtier.compaction import SERVICES, service_actions
from memtier.compaction.clean import CleanPolicy, plan_clean
from memtier.compaction.cluster import plan_clustering
from memtier.compaction.compact import CompactionPolicy, SliceDebt, plan_compaction, slice_debt
from memtier.config import ServicesConfig, load
from memtier.errors import CommitFailedError, InvalidArgumentError, MemtierError, TableNotFoundError
from memtier.exchange import TableLocation
from memtier.hudi.commit import CommitMetadata
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.plans import CleanerPlan, ClusteringPlan, CompactionPlan
from memtier.hudi.tablemeta import TableMeta
from memtier.hudi.timeline import Instant, State
from memtier.master.commits import FileGroupRef
from memtier.master.requests import Request, compacted, compaction_targets
from memtier.master.tasks import (
    COMPLETED,
    FAILED,
    QUEUED,
    RUNNING,
    Leases,
    Task,
    TaskQueue,
    priority,
)

__all__ = ["TableServices"]

log = logging.getLogger(__name__)


class CommitPath(Protocol):
    """What the table services need of the master (:class:`~memtier.master.Master`): the
    tables' metadata and options, and its commit path, through which every instant goes."""

    def service_overrides(self, table: str) -> dict[str, str]: ...
    def meta(self, table: str) -> TableMeta: ...
    def table_location(self, table: str) -> TableLocation: ...
    def begin_planned(
        self, table: str, action: str, owner: str,
        make_plan: Callable[[set[FileGroupRef]], tuple[bytes, list[FileGroupRef]] | None],
    ) -> tuple[str, list[FileGroupRef]] | None: ...
    def adopt_pending(self, table: str, instant: str, action: str, owner: str,
                      file_groups: Sequence[FileGroupRef]) -> None: ...
    def start_pending(self, table: str, instant: str) -> None: ...
    def revert_to_requested(self, table: str, instant: str) -> None: ...
    def abort_commit(self, table: str, instant: str, planned: bytes = b"") -> None: ...
    def compact_metadata_table(self, table: str, max_delta_commits: int) -> str | None: ...
    def complete_commit(
        self, table: str, instant: str, content: bytes | CommitMetadata, *,
        file_groups: Sequence[FileGroupRef] = (), check_conflicts: bool | Sequence[str] = False,
        life: str | None = None,
    ) -> None: ...

OWNER = "table-services"
#: Attempts after which a failing task stops being retried (until scheduled again).
_MAX_ATTEMPTS = 5
#: Finished requests kept for callers still asking about them.
_KEEP_REQUESTS = 256


class TableServices:
    """Scheduling, tasks and leases of every table of one master; thread-safe."""

    def __init__(self, master: CommitPath, options: Mapping[str, str] | None = None,
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
        self._requests: dict[int, Request] = {}
        self._request_ids = itertools.count(1)
        self._requests_lock = threading.Lock()  # advancing requests (taken before the others)

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
        self, table: str, kind: str, *, force: bool = False, only: Collection[tuple[str, str]] | None = None,
        partitions: Sequence[str] | None = None, sort_columns: Sequence[str] = (),
    ) -> Task | None:
        """Plan a ``kind`` ("compaction", "clustering", "clean") of ``table`` and queue it;
        the task, or None when there is nothing to do (or what there is, is held by
        pending instants). ``force`` takes every slice with log files (compaction;
        ``only`` those of some file groups) or every partition (clustering); a clean is
        not planned while another is pending."""
        config = self.table_config(table)
        meta = _service_meta(self._master.meta(table), kind)

        def make_plan(busy: Collection[tuple[str, str]]) -> tuple[bytes, list[tuple[str, str]]] | None:
            if kind == "compaction":
                view = _view(meta)
                policy = CompactionPolicy(config.compaction_log_files, config.compaction_log_fraction)
                plan = plan_compaction(view, policy, busy=busy, only=only, force=force)
                return None if plan is None else (plan.to_avro(), plan.file_groups())
            if kind == "clustering":
                view = _view(meta)
                clustering = plan_clustering(meta, view, busy=busy, partitions=partitions,
                                             sort_columns=sort_columns, force=force)
                if clustering is None:
                    return None
                return clustering.to_avro(meta.base_path), clustering.file_groups()
            timeline = meta.timeline()
            if timeline.pending(("clean",)):
                return None  # it would delete the same files
            view = FileSystemView.build(meta.io, meta.base_path, timeline, keep_replaced=True)
            with self._lock:
                leased = self._leases.instants(table, self._clock())
            cleaning = plan_clean(view, CleanPolicy(config.clean_retain_versions), leased)
            return None if cleaning is None else (cleaning.to_avro(meta.base_path), [])

        begun = self._master.begin_planned(table, service_actions(meta.layout)[kind], OWNER, make_plan)
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
        return task

    # == manual calls ====================================================================
    def request(
        self, table: str, kind: str, *, partitions: Sequence[str] | None = None, sort_columns: Sequence[str] = (),
    ) -> dict[str, Any] | None:
        """A manual call: do a ``kind`` of ``table`` covering what there is to do now
        (:mod:`memtier.master.requests`), planning it or joining the pending tasks that
        already do it; the request (poll it with :meth:`request_status`), or None when
        there was nothing to do."""
        meta = _service_meta(self._master.meta(table), kind)
        request = Request(next(self._request_ids), table, kind, sort_columns=tuple(sort_columns))
        if kind == "compaction":
            request.file_groups = compaction_targets(_view(meta))
            if not request.file_groups:
                return None
        elif kind == "clustering":
            request.partitions = tuple(p for p in _view(meta).partitions() if partitions is None or p in partitions)
            if not request.partitions:
                return None
        with self._requests_lock:
            self._advance(request)
            if request.state == COMPLETED and not request.task_ids:
                return None  # a clean with nothing to clean
            self._requests[request.request_id] = request
            while len(self._requests) > _KEEP_REQUESTS:
                oldest = next((i for i, r in self._requests.items() if r.state != RUNNING), None)
                if oldest is None:
                    break
                del self._requests[oldest]
            return self._request_dict(request)

    def request_status(self, request_id: int) -> dict[str, Any]:
        """A request as it stands (advanced first: what it waited for may be plannable now)."""
        with self._requests_lock:
            request = self._requests.get(request_id)
            if request is None:
                raise InvalidArgumentError(f"no table-service request {request_id} (unknown, or finished long ago)")
            if request.state == RUNNING:
                self._advance(request)
            return self._request_dict(request)

    def _request_dict(self, request: Request) -> dict[str, Any]:
        with self._lock:
            tasks = {i: t for i in request.task_ids if (t := self._tasks.get(i)) is not None}
        return request.to_dict(tasks)

    def _advance(self, request: Request) -> None:
        """Move a running request on (its lock held): nothing while a task of it is
        queued or running; failed when a task it planned failed (a joined one that failed
        leaves its work to be planned again); else done, or the next tasks planned or
        joined."""
        with self._lock:
            tasks = [t for i in request.task_ids if (t := self._tasks.get(i)) is not None]
        if any(t.state in (QUEUED, RUNNING) for t in tasks):
            return
        failed = next((t for t in tasks if t.state == FAILED and t.task_id not in request.joined), None)
        if failed is not None:
            request.fail(f"{failed.kind} {failed.instant} failed: {failed.error}")
            return
        try:
            if request.kind == "compaction":
                self._advance_compaction(request)
            elif request.kind == "clustering":
                self._advance_clustering(request, tasks)
            else:
                self._advance_clean(request, tasks)
        except TableNotFoundError as e:
            request.fail(str(e))

    def _advance_compaction(self, request: Request) -> None:
        view = _view(self._master.meta(request.table))
        remaining = {g for g, since in request.file_groups.items() if not compacted(view, g, since)}
        if not remaining:
            request.complete()
            return
        for group in sorted(remaining):
            pending = view.pending_compaction.get(group) or view.pending_clustering.get(group)
            if pending is not None:
                self._join(request, pending)
        if request.state == RUNNING:
            self._add_own(request, self.schedule(request.table, "compaction", force=True, only=remaining))

    def _advance_clustering(self, request: Request, tasks: Sequence[Task]) -> None:
        view = _view(self._master.meta(request.table))
        mine = {t.instant for t in tasks if t.task_id not in request.joined}
        done = {p for (p, _), instant in view.replaced.items() if instant in mine}
        remaining = [p for p in request.partitions if p not in done and p in view.partitions()]
        if not remaining:
            request.complete()
            return
        for (partition, _), pending in sorted(view.pending_clustering.items()):
            if partition in remaining:
                self._join(request, pending)
        if request.state == RUNNING and not self._active(request):
            self._add_own(request, self.schedule(request.table, "clustering", force=True, partitions=remaining,
                                                 sort_columns=request.sort_columns))

    def _advance_clean(self, request: Request, tasks: Sequence[Task]) -> None:
        if any(t.task_id not in request.joined for t in tasks):
            request.complete()  # its own clean completed
            return
        with self._lock:
            pending = [t.instant for t in self._tasks.active(request.table, "clean")]
        for instant in pending:
            self._join(request, instant)
        if request.state != RUNNING or self._active(request):
            return
        own = self.schedule(request.table, "clean", force=True)
        if own is None:
            request.complete()  # nothing (more) to clean
        self._add_own(request, own)

    def _join(self, request: Request, instant: str) -> None:
        """The task executing the pending ``instant`` does part of the request's work."""
        with self._lock:
            task = self._tasks.of_instant(request.table, instant)
        if task is None:
            return  # (a pending instant with no task yet: recovered on a master restart)
        if task.state == FAILED:
            request.fail(f"{task.kind} {task.instant} is pending but failed: {task.error}")
            return
        request.add(task, joined=True)

    def _add_own(self, request: Request, task: Task | None) -> None:
        if task is not None:
            request.add(task, joined=False)

    def _active(self, request: Request) -> bool:
        with self._lock:
            return any((t := self._tasks.get(i)) is not None and t.state in (QUEUED, RUNNING)
                       for i in request.task_ids)

    def _advance_requests(self) -> None:
        """Move on the running requests whose tasks are done (those a write in progress
        held back are planned once it is over)."""
        with self._requests_lock:
            for request in [r for r in self._requests.values() if r.state == RUNNING]:
                self._advance(request)

    def recover(self, table: str, meta: TableMeta) -> None:
        """After a master (re)start: queue the table's pending compactions and cleans
        again (an inflight compaction goes back to requested first); pending clusterings
        are rolled back (their plans may no longer hold)."""
        timeline = meta.timeline()
        actions = service_actions(meta.layout)
        for pending in timeline.pending(tuple(actions.values())):
            kind = next(k for k, a in actions.items() if a == pending.action)
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
        with self._requests_lock:
            for request in self._requests.values():
                if request.table == table and request.state == RUNNING:
                    request.fail(f"table {table} was dropped")
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
            return {**task.to_dict(), "path": location.path, "storage_options": dict(location.storage_options),
                    "schema_version": self._master.meta(task.table).schema_version}

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
        """Give back tasks of silent actors; compact Hudi's metadata tables that are due;
        measure compaction debt; plan what the policies say is due (at most every
        ``services.check-interval``)."""
        now = self._clock()
        with self._lock:
            expired = self._tasks.expired(now)
        for task in expired:
            self._give_back(task, f"actor {task.worker} went silent")
        if now - self._last_check < self.config.check_interval.total_seconds():
            return
        self._last_check = now
        for table in tables:
            self._compact_metadata_table(table)
        if self.config.workers == 0:
            return  # no pool: a plan would stay pending forever (and hide rows from hudi-rs)
        self._advance_requests()
        for table in tables:
            try:
                self._check_table(table, now)
            except MemtierError:
                log.exception("table services of %s: checking failed", table)

    def _compact_metadata_table(self, table: str) -> None:
        """Compact Hudi's metadata table of ``table`` if it is due (the master does it, not
        the pool: a few small files, under the table's commit lock)."""
        try:
            self._master.compact_metadata_table(table, self.table_config(table).metadata_compact_delta_commits)
        except MemtierError:
            log.exception("table services of %s: compacting Hudi's metadata table failed", table)

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


def _service_meta(meta: TableMeta, kind: str) -> TableMeta:
    """``meta``, once ``kind`` is checked to be a table service the table can have."""
    if kind not in SERVICES:
        raise InvalidArgumentError(f"a table service is one of {sorted(SERVICES)}, not {kind!r}")
    if kind == "compaction" and not meta.is_merge_on_read:
        raise InvalidArgumentError(f"table {meta.config.name} is copy-on-write: it has no log files to compact")
    return meta


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
