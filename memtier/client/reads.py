"""The read path: a read point planned by the master (or reused while no commit moved it),
then per file group the Hudi slice merged with the table servers' unflushed rows; plans
executed in parts (Spark tasks); key lookups."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memtier.client.api import retrying
from memtier.client.base import ClientBase
from memtier.client.routing import Routing
from memtier.errors import InvalidArgumentError, MemtierError, NotFoundError, NotOwnerError, RpcError
from memtier.exchange import TxnSnapshot
from memtier.hudi.avro import META_FIELDS
from memtier.hudi.deletes import DELETE_FLAG
from memtier.hudi.filters import Filter, key_buckets, key_filters, validate
from memtier.hudi.keys import KeyColumns, whole
from memtier.hudi.merge import LogEntry
from memtier.hudi.reader import read_columns, read_instants, read_table
from memtier.hudi.schema import to_table
from memtier.hudi.slicereader import conform_columns
from memtier.hudi.tablemeta import RECORD_KEY, TableMeta
from memtier.hudi.timeline import Timeline
from memtier.io import open_fileio
from memtier.parallel import Prefetch
from memtier.tableserver.tables import FILE_ID_COLUMN, PARTITION_COLUMN, UNRESOLVED

log = logging.getLogger(__name__)


READ_MODES = ("latest", "committed", "read_optimized", "incremental")


@dataclass(frozen=True)
class ReadRequest:
    """One read, as the client was asked for it."""

    name: str
    mode: str
    columns: Sequence[str] | None = None
    filters: Sequence[Filter] | None = None
    as_of: str | datetime | None = None
    include_meta: bool = False
    buckets: frozenset[int] | None = None  # point lookups read only these buckets
    start: str | datetime | None = None  # incremental reads: (start, end]
    end: str | datetime | None = None

    def check(self) -> ReadRequest:
        """The request with its instants normalized; a clear error for a bad combination."""
        if self.mode not in READ_MODES:
            raise InvalidArgumentError(f"mode must be one of {READ_MODES}, got {self.mode!r}")
        as_of, start, end = read_instants(self.mode, self.as_of, self.start, self.end)
        return dataclasses.replace(self, as_of=as_of, start=start, end=end)


@dataclass(frozen=True)
class ReadPlan:
    """A read planned once and executed in parts, anywhere (Spark tasks): the request,
    the master's read point (instant, transactions, routing, lease) and the parts, each
    a set of buckets (None: the whole table, for tables without buckets). Executing
    every part and concatenating gives exactly what :meth:`Client.read` would."""

    request: ReadRequest
    master_plan: Mapping[str, Any]
    parts: tuple[frozenset[int] | None, ...]

    @property
    def lease(self) -> int | None:
        return self.master_plan.get("lease")


class Reads(ClientBase):
    """Reads and lookups of a :class:`~memtier.client.Client`."""

    def _meta(self, name: str, plan: Mapping[str, Any]) -> TableMeta:
        path = plan["path"]
        with self._lock:
            meta = self._metas.get(name)
        if meta is None or meta.base_path != path or meta.schema_version < plan.get("schema_version", 0):
            meta = TableMeta.load(open_fileio(path, plan.get("storage_options") or None), path)
            with self._lock:
                self._metas[name] = meta
        return meta

    def read(
        self,
        name: str,
        mode: str = "latest",
        columns: Sequence[str] | None = None,
        filters: Sequence[Filter] | None = None,
        as_of: str | datetime | None = None,
        *,
        include_meta: bool = False,
        start: str | datetime | None = None,
        end: str | datetime | None = None,
    ) -> pa.Table:
        """Read a table. Modes:

        * ``"latest"``: every acknowledged row not of an aborted transaction (table-server
          memory or WAL, then the Hudi files), merged per file group as Hudi merges its
          log files: the newest ordering value wins;
        * ``"committed"``: only rows of committed transactions (and auto-commit writes);
        * ``"read_optimized"``: the Hudi base files only, as a plain Hudi reader sees them.

        * ``"incremental"``: the rows committed to the Hudi files in (``start``, ``end``]
          (``end``: the latest commit), in their latest version (files only).

        ``as_of`` reads the Hudi table as of an instant (time travel; files only).
        """
        return self._read(ReadRequest(name, mode, columns, filters, as_of, include_meta, start=start, end=end))

    def lookup(self, name: str, keys: Any, columns: Sequence[str] | None = None) -> pa.Table:
        """The latest rows of the given keys: a table (or dict, or for a one-column key a
        list) of key values; ``columns`` (default: all) are the only ones read. Only the
        keys' file groups are read, memory first."""
        route = self._route(name)
        if not route.record_key:
            raise InvalidArgumentError(f"table {name!r} is append-only: it has no record key to look up")
        if isinstance(keys, (list, tuple)) and len(route.record_key) == 1:
            keys = {route.record_key[0]: list(keys)}
        key_table = to_table(pa.table(keys) if isinstance(keys, dict) else keys)
        missing = [k for k in route.record_key if k not in key_table.column_names]
        if missing:
            raise InvalidArgumentError(f"lookup keys lack record-key columns {missing}")
        key_table = key_table.select(list(route.record_key)).cast(
            pa.schema([route.schema.field(k) for k in route.record_key])
        )
        buckets = set(KeyColumns.of(key_table, route.record_key).bucket_ids(route.buckets).tolist())
        filters = [(k, "in", key_table.column(k).to_pylist()) for k in route.record_key]
        read = None if columns is None else list(dict.fromkeys([*columns, *route.record_key]))
        found = self._read(ReadRequest(name, "latest", columns=read, filters=filters, buckets=frozenset(buckets)))
        if len(route.record_key) > 1:  # the per-column "in"s over-select: keep exact tuples
            wanted = set(zip(*(key_table.column(k).to_pylist() for k in route.record_key), strict=True))
            rows = zip(*(found.column(k).to_pylist() for k in route.record_key), strict=True)
            found = found.filter(pa.array([r in wanted for r in rows], pa.bool_()))
        return found.select(list(columns)) if columns is not None else found

    def _read(self, request: ReadRequest) -> pa.Table:
        checked = request.check()
        return retrying(f"read of {request.name}", lambda: self._read_once(checked))

    def _read_once(self, r: ReadRequest) -> pa.Table:
        """One read: the table servers' unflushed rows and the files, at a read point.

        A read of memory (``latest``/``committed``) first tries the read point of the
        table's previous plan without asking the master: it lists the Hudi timeline
        (the master is its only writer) and, when the newest commit is still the
        point's instant, asks the table servers at that point and reads the files as of
        it. The servers refuse buckets they no longer serve and flag rows of
        transactions the point's snapshot left open or did not know (their outcome may
        have changed), and a file slice cleaned meanwhile fails its read: each of these
        falls back to a plan. Otherwise (a new commit, or no previous plan) the master
        plans the read while the table servers are asked at the previous point with the
        newest instant listed; their rows are kept only if the new plan has that same
        point (instant, transactions, routing), else they are asked again at the plan's.

        Either way the servers' rows are those they hold beyond the point's instant or
        flushed by a deltacommit the plan saw pending (flushes of different servers
        complete out of instant order), and the files are read with those deltacommits
        pending, completed since or not (a server keeps flushed blocks listed for a minute
        after their flush, the timeline is listed after the read began, and a point is
        reused only while its pending deltacommits are), so no row is missed or read twice
        and a write acknowledged before the read began is in it."""
        previous = self._points.get(r.name) if r.mode in ("latest", "committed") and r.as_of is None else None
        if previous is not None:
            timeline = self._meta(r.name, previous).timeline()
            last = timeline.last_completed()
            newest = last.timestamp if last is not None else None
            pending = previous.get("pending", ())
            if newest == previous["instant"] and not any(timeline.is_completed(p) for p in pending):
                found = self._read_at(r, previous, timeline)
                if found is not None:
                    return found
            previous = {**previous, "instant": newest}
        planning = self._pool.submit(self.master.read_plan, r.name, r.as_of)
        try:
            early = None
            if previous is not None:
                with suppress(NotOwnerError, RpcError):  # asked again below
                    early, _ = self._memory(r, previous, self._buckets(r, previous))
        finally:
            plan = planning.result()
        try:  # the lease keeps cleaning off the file slices this read opens
            self._points[r.name] = _point(plan)
            memory = early if previous is not None and previous == _point(plan) else None
            return self._read_planned(r, plan, self._buckets(r, plan), memory)
        finally:
            if plan.get("lease") is not None:  # given back off the read's path: one round trip less
                self._pool.submit(self._release_lease, plan["lease"])

    def _read_at(self, r: ReadRequest, point: Mapping[str, Any], timeline: Timeline) -> pa.Table | None:
        """The read at a previous plan's ``point`` whose instant is still the newest
        commit of ``timeline`` (listed after the read began), with no master call; None
        when the point no longer holds (see :meth:`_read_once`)."""
        buckets = self._buckets(r, point)

        def memory() -> list[pa.Table]:
            try:
                rows, unresolved = self._memory(r, point, buckets)
            except MemtierError as e:  # a moved bucket, a restarted server, a table made again...: a plan tells
                raise _PointMoved from e
            if unresolved:
                raise _PointMoved
            return rows

        try:
            return self._read_planned(r, point, buckets, memory, timeline)
        except (_PointMoved, NotFoundError):  # NotFoundError: a slice cleaned since the plan
            return None

    def _release_lease(self, lease: int) -> None:
        try:
            self.master.release_lease(lease)
        except (NotOwnerError, RpcError) as e:  # it expires on its own
            log.info("giving back read lease %s failed (%s)", lease, e)

    def plan(self, request: ReadRequest, *, max_parts: int | None = None) -> ReadPlan:
        """Plan a read to run in parts: one per bucket it reads (at most ``max_parts``,
        buckets dealt round-robin). The plan holds a lease on the file slices it reads:
        give it back with :meth:`release` once every part ran (else it expires)."""
        checked = request.check()
        master_plan = retrying(f"read plan of {request.name}",
                                lambda: self.master.read_plan(checked.name, checked.as_of))
        buckets = self._buckets(checked, master_plan)
        if buckets is None and int(master_plan.get("buckets") or 0) > 0:
            buckets = frozenset(range(int(master_plan["buckets"])))
        if buckets is None:
            return ReadPlan(checked, master_plan, (None,))
        ordered = sorted(buckets)
        count = len(ordered) if max_parts is None else max(1, min(max_parts, len(ordered)))
        parts = tuple(frozenset(ordered[i::count]) for i in range(count) if ordered[i::count])
        return ReadPlan(checked, master_plan, parts)

    def read_part(self, plan: ReadPlan, part: int) -> pa.Table:
        """Execute one part of a plan (in any process that can reach the cluster)."""
        return self._read_planned(plan.request, plan.master_plan, plan.parts[part])

    def release(self, plan: ReadPlan) -> None:
        """Give a plan's lease back (its file slices may be cleaned)."""
        if plan.lease is not None:
            self.master.release_lease(plan.lease)

    def _buckets(self, r: ReadRequest, plan: Mapping[str, Any]) -> frozenset[int] | None:
        """The buckets a read must look at (None: all): the request's (a lookup gives its
        keys' buckets), else those equalities on the record key pin."""
        if r.buckets is not None:
            return r.buckets
        meta = self._meta(r.name, plan)
        route = Routing.of(plan)
        filters = validate(r.filters, [*META_FIELDS, *meta.schema.names])
        if route.buckets > 0 and route.record_key:
            pinned = key_buckets(filters, route.record_key, route.schema, route.buckets)
            if pinned is not None:
                return frozenset(pinned)
        return None

    def _read_planned(
        self, r: ReadRequest, plan: Mapping[str, Any], buckets: frozenset[int] | None,
        memory: list[pa.Table] | Callable[[], list[pa.Table]] | None = None, timeline: Timeline | None = None,
    ) -> pa.Table:
        """Execute a planned read; ``memory``: the table servers' rows at the plan's
        point when already fetched, or how to fetch them (by default :meth:`_memory`):
        fetched on another thread while files are read, if there are any; ``timeline``: the table's
        timeline when already listed (else listed here)."""
        meta = self._meta(r.name, plan)
        filters = validate(r.filters, [*META_FIELDS, *meta.schema.names])
        files = {"columns": r.columns, "filters": filters, "include_meta": r.include_meta,
                 "buckets": buckets, "cache": self._files}
        if r.mode == "incremental":
            return read_table(meta, mode="incremental", start=r.start, end=r.end or plan["instant"], **files)
        if r.mode == "read_optimized" or r.as_of is not None:
            hudi_mode = "read_optimized" if r.mode == "read_optimized" else "snapshot"
            return read_table(meta, mode=hudi_mode, as_of=r.as_of, **files)
        needed = read_columns(meta, columns=r.columns, filters=filters, include_meta=r.include_meta)
        timeline = (timeline if timeline is not None else meta.timeline()).with_pending(plan.get("pending", ()))
        extra: Mapping[tuple[str, str], list[LogEntry]] | Prefetch[Mapping[tuple[str, str], list[LogEntry]]]
        if isinstance(memory, list):
            extra = _entries_by_file_group(memory, meta, needed)
        else:
            fetch = memory if memory is not None else (lambda: self._memory(r, plan, buckets)[0])
            extra = Prefetch(lambda: _entries_by_file_group(fetch(), meta, needed), self._fetches)
        return read_table(meta, as_of=plan["instant"], extra=extra, timeline=timeline, **files)

    def _memory(
        self, r: ReadRequest, plan: Mapping[str, Any], buckets: frozenset[int] | None
    ) -> tuple[list[pa.Table], bool]:
        """The table servers' unflushed rows a ``latest``/``committed`` read needs at the
        plan's point (the key filters applied there), and whether some belong to
        transactions the plan's snapshot left unresolved."""
        meta = self._meta(r.name, plan)
        route = Routing.of(plan)
        filters = validate(r.filters, [*META_FIELDS, *meta.schema.names])
        needed = read_columns(meta, columns=r.columns, filters=filters, include_meta=r.include_meta)
        pushed = [f for f in key_filters(filters, route.record_key) if _json_value(f[2])]
        return self._read_servers(
            r.name, route, (plan["instant"], plan.get("pending", ())), TxnSnapshot.from_dict(plan["snapshot"]),
            r.mode == "committed", needed, buckets, pushed,
        )

    def _read_servers(
        self, name: str, route: Routing, point: tuple[str | None, Sequence[str]], snapshot: TxnSnapshot,
        committed_only: bool, needed: list[str], buckets: frozenset[int] | None,
        pushed: list[Filter],
    ) -> tuple[list[pa.Table], bool]:
        """Each owning server's unflushed rows of ``buckets`` (None: all) at the ``point``
        (the instant read as of, and those up to it still pending then), the ``pushed``
        record-key filters applied there so that only the keys asked for travel; and
        whether a server flagged rows of transactions ``snapshot`` left unresolved."""
        instant, pending = point
        columns = [c for c in needed if c in route.schema.names]

        def one(item: tuple[str, list[int]]) -> pa.Table:
            server_id, owned = item
            wanted = owned if buckets is None else sorted(set(owned) & buckets)
            if not wanted:
                return pa.table({})
            handle = self._server(server_id, route.location(server_id))
            return handle.read(name, as_of_instant=instant, pending=pending, snapshot=snapshot,
                               committed_only=committed_only, columns=columns, buckets=wanted,
                               key_filters=pushed, schema_version=route.schema_version)

        items = list(route.server_buckets().items())
        tables = [one(items[0])] if len(items) == 1 else list(self._pool.map(one, items))
        unresolved = any(UNRESOLVED in (t.schema.metadata or {}) for t in tables)
        return [t for t in tables if t.num_rows], unresolved


class _PointMoved(Exception):
    """A previous plan's read point no longer holds for a read (see ``Client._read_at``)."""


def _point(plan: Mapping[str, Any]) -> dict[str, Any]:
    """What a table server's answer to a read depends on in a plan: all of it but the
    lease (the instant, the transactions, the routing, the table's description)."""
    return {k: v for k, v in plan.items() if k != "lease"}


def _json_value(value: Any) -> bool:
    """Whether a filter value travels as JSON unchanged (a scalar, or a list of them)."""
    if isinstance(value, (list, tuple)):
        return all(_json_value(v) for v in value)
    return value is None or isinstance(value, (str, int, float))


def _entries_by_file_group(
    memory: list[pa.Table], meta: TableMeta, needed: list[str]
) -> dict[tuple[str, str], list[LogEntry]]:
    """Table-server rows as one log entry per file group, in write order, typed and with
    the columns the file read of the same request has (meta columns null, record keys
    computed when the merge needs them), deleted rows flagged."""
    entries: dict[tuple[str, str], list[LogEntry]] = {}
    for table in memory:
        partitions = whole(table.column(PARTITION_COLUMN))
        file_ids = whole(table.column(FILE_ID_COLUMN))
        flags = whole(table.column(DELETE_FLAG))
        data = table.drop_columns([PARTITION_COLUMN, FILE_ID_COLUMN])
        if DELETE_FLAG not in needed:
            data = data.drop_columns([DELETE_FLAG])
        width = len(file_ids.dictionary)
        codes = partitions.indices.to_numpy().astype(np.int64) * width + file_ids.indices.to_numpy()
        order = np.argsort(codes, kind="stable")  # by file group, write order kept inside
        sorted_codes = codes[order]
        starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
        for start, end in zip(starts, np.r_[starts[1:], len(order)], strict=True):
            code = int(sorted_codes[start])
            key = (partitions.dictionary[code // width].as_py(), file_ids.dictionary[code % width].as_py())
            every_row = end - start == len(order)  # one file group (a lookup's usual answer): no copy
            taken = pa.array(order[start:end])
            rows = data if every_row else data.take(taken)
            records = conform_columns(rows, meta.file_schema, needed)
            if RECORD_KEY in needed and meta.config.record_key_fields:
                keys_array = KeyColumns.of(rows, meta.config.record_key_fields).record_keys()
                records = records.set_column(records.column_names.index(RECORD_KEY), RECORD_KEY, keys_array)
            deleting = flags if every_row else flags.take(taken)
            mask = deleting if pc.any(deleting).as_py() else None
            entries.setdefault(key, []).append(LogEntry(records=records, delete_mask=mask))
    return entries
