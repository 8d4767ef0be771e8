"""Flushes on demand and the table services a client asks for (compaction, clustering,
cleaning, catalog sync), and waiting for their requests."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from memtier.client.api import MasterAPI, retrying
from memtier.client.base import ClientBase

log = logging.getLogger(__name__)


class Services(ClientBase):
    """Flushes and table-service requests of a :class:`~memtier.client.Client`."""

    def flush(self, name: str) -> list[str]:
        """Flush everything acknowledged for the table into Hudi files (committed
        transactions only; open ones wait); the instants committed."""

        def flush_all() -> list[str]:
            route = self._route(name, refresh=True)
            instants = []
            for server_id in route.server_buckets():
                instants += self._server(server_id, route.location(server_id)).flush(name, seal=True)
            return instants

        return retrying(f"flush of {name}", flush_all)

    def compact(self, name: str, *, wait: bool = True,
                progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any] | None:
        """Compact every file slice of the table that has log files now (into new base
        files, which the read-optimized view and Trino then show), or None when none has.
        Returns the request (its final state with ``wait``): its ``tasks`` are the
        compactions that do the work, those it planned and those already pending that it
        joined (``joined``: planned by the automatic policy, say); with ``wait`` it returns
        once every such slice is compacted (``state`` completed) or a task of its own
        failed (``failed``, with ``error``). ``progress(request)`` is called as it moves."""
        return self._service(name, "compaction", wait, progress)

    def cluster(self, name: str, *, partitions: Sequence[str] | None = None, sort_columns: Sequence[str] = (),
                wait: bool = True, progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any] | None:
        """Rewrite the file groups of ``partitions`` (all by default) into one per bucket,
        sorted by ``sort_columns`` (after a pending clustering of them, which it joins);
        see :meth:`compact`."""
        return self._service(name, "clustering", wait, progress, partitions=partitions, sort_columns=sort_columns)

    def clean(self, name: str, *, wait: bool = True,
              progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any] | None:
        """Delete file slices retention no longer keeps (never one a read holds), after a
        pending clean, which it joins; see :meth:`compact`."""
        return self._service(name, "clean", wait, progress)

    def set_services(self, name: str, options: Mapping[str, str]) -> dict[str, str]:
        """Set the table's own ``services.*`` policies (e.g. ``services.compaction-log-files``)."""
        return self.master.set_services(name, options)

    def sync_catalog(self, name: str, metastore: str | None = None, database: str | None = None) -> dict[str, Any]:
        """Register the table and its partitions in a metastore now (``metastore``: a Trino
        file-metastore directory or a Hive Metastore's ``thrift://host:port``; by default the
        cluster's ``catalog.file-metastore`` or ``catalog.hive-metastore``, which the master
        also keeps current on its own): ``name_ro`` and ``name_rt`` in ``database``.
        Returns what it did (tables, tables rewritten, partitions synced and added)."""
        return self.master.sync_catalog(name, metastore, database)

    def _service(self, name: str, kind: str, wait: bool,
                 progress: Callable[[dict[str, Any]], None] | None, **options: Any) -> dict[str, Any] | None:
        request = self.master.schedule_service(name, kind, **options)
        if request is None or not wait:
            return request
        return self.wait_service(request, progress)

    def wait_service(self, request: dict[str, Any],
                     progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Wait for a table-service request to complete or fail; its final state."""
        return wait_for_request(self.master, request, progress)


def wait_for_request(master: MasterAPI, request: dict[str, Any],
                     progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Poll a table-service request until it completes or fails; its final state.
    ``progress(request)`` sees each change of its tasks' states or progress."""
    seen = None
    while True:
        if progress is not None and _moves(request) != seen:
            seen = _moves(request)
            progress(request)
        if request["state"] in ("completed", "failed"):
            return request
        time.sleep(0.1)
        request = master.service_request(request["request_id"])


def _moves(request: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a progress report shows of a request: its state and each task's."""
    return (request["state"], *((t["task_id"], t["state"], t["done"], t["total"]) for t in request["tasks"]))
