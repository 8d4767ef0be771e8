"""One table-service worker: takes planned compactions, clusterings and cleans from the
master, executes them on its own CPUs, and hands the result back for the master to commit.

Plain Python (:mod:`memtier.cluster` runs workers as a pool of Ray actors). The plan of
every task is the one recorded on the timeline (``<t>.compaction.requested`` etc.), so a
worker needs nothing but the instant; a worker that dies mid-task leaves files the master
deletes (rolling the attempt back) before another worker executes the plan again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from memtier.compaction import service_actions
from memtier.compaction.clean import clean
from memtier.compaction.cluster import cluster, clustering_metadata
from memtier.compaction.compact import compact, compaction_metadata
from memtier.hudi.plans import CleanerPlan, ClusteringPlan, CompactionPlan
from memtier.hudi.tablemeta import TableMeta
from memtier.hudi.timeline import Instant, State
from memtier.io import open_fileio, sweep_temp_files

__all__ = ["ServiceLink", "ServiceWorker"]

log = logging.getLogger(__name__)


class ServiceLink(Protocol):
    """The master's calls a table-service worker makes."""

    def service_worker_started(self, worker: str, cpus: str | None = None) -> None: ...

    def next_service_task(self, worker: str) -> dict[str, Any] | None: ...

    def service_progress(self, task_id: int, worker: str, done: int, total: int) -> bool: ...

    def finish_service_task(
        self, task_id: int, worker: str, content: bytes | None, error: str | None = None,
        file_groups: Sequence[tuple[str, str]] = (),
    ) -> dict[str, Any]: ...


class _Keepalive:
    """Reports a running task's progress every ``interval`` seconds (which keeps it ours)."""

    def __init__(self, link: ServiceLink, worker: str, task_id: int, interval: float) -> None:
        self.done = self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(link, worker, task_id, interval),
                                        name="memtier-service-keepalive", daemon=True)
        self._thread.start()

    def update(self, done: int, total: int) -> None:
        self.done, self.total = done, total

    def _run(self, link: ServiceLink, worker: str, task_id: int, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                if not link.service_progress(task_id, worker, self.done, self.total):
                    log.warning("task %d was given to another worker", task_id)
                    return
            except Exception:
                log.exception("reporting progress of task %d failed", task_id)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class ServiceWorker:
    """Executes table-service tasks the master hands out (``cpus``: where it runs, for the
    master's status)."""

    def __init__(self, worker_id: str, link: ServiceLink, *, keepalive_s: float = 2.0,
                 cpus: str | None = None) -> None:
        self.worker_id = worker_id
        self.cpus = cpus
        self._link = link
        self._keepalive_s = keepalive_s
        self._metas: dict[str, TableMeta] = {}
        self.completed = 0

    def start(self) -> None:
        """Tell the master this worker (re)started: tasks an earlier life held go back."""
        self._link.service_worker_started(self.worker_id, self.cpus)

    def run_once(self) -> dict[str, Any] | None:
        """Take one task and execute it; the finished task, or None when there was none."""
        task = self._link.next_service_task(self.worker_id)
        if task is None:
            return None
        keepalive = _Keepalive(self._link, self.worker_id, task["task_id"], self._keepalive_s)
        try:
            content, file_groups = self._execute(task, keepalive.update)
        except Exception as e:
            log.exception("%s %s of %s failed", task["kind"], task["instant"], task["table"])
            keepalive.stop()
            return self._link.finish_service_task(task["task_id"], self.worker_id, None, f"{type(e).__name__}: {e}")
        keepalive.stop()
        self.completed += 1
        return self._link.finish_service_task(task["task_id"], self.worker_id, content, None, file_groups)

    def _meta(self, path: str, storage_options: Mapping[str, str], schema_version: int) -> TableMeta:
        """The table as of its schema ``schema_version`` (or a later one): a task reads
        files written under it or an older schema, and writes under it."""
        meta = self._metas.get(path)
        if meta is None or meta.schema_version < schema_version:
            meta = self._metas[path] = TableMeta.load(open_fileio(path, storage_options or None), path)
        return meta

    def _execute(self, task: Mapping[str, Any], progress: Any) -> tuple[bytes, list[tuple[str, str]]]:
        meta = self._meta(task["path"], task["storage_options"], task["schema_version"])
        timeline = meta.timeline()
        instant, kind = task["instant"], task["kind"]
        requested = Instant(instant, service_actions(meta.layout)[kind], State.REQUESTED)
        plan_bytes = meta.io.read_bytes(timeline.instant_path(meta.base_path, requested))
        if kind == "compaction":
            stats = compact(meta, instant, CompactionPlan.from_avro(plan_bytes), timeline, progress)
            return compaction_metadata(meta, stats).to_json(), []
        if kind == "clustering":
            stats, replaced = cluster(meta, instant, ClusteringPlan.from_avro(plan_bytes), timeline, progress)
            written = [(s.partition_path, s.file_id) for s in stats]
            return clustering_metadata(meta, stats, replaced).to_json(), [*replaced, *written]
        last = timeline.last_completed()
        metadata = clean(meta, instant, CleanerPlan.from_avro(plan_bytes), last.timestamp if last else "")
        for path in sweep_temp_files(meta.io, meta.base_path, now=time.time()):
            log.info("deleted %s, a temporary file a crashed writer left", path)
        return metadata.to_avro(), []
