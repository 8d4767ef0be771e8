"""The master core: catalog, table-server registry, bucket placement, transactions, and
sole ownership of every table's Hudi timeline.

Plain Python, no Ray: :mod:`memtier.cluster` wraps it in an actor. Its persistent state
(:mod:`memtier.master.state`) is saved durably before any change is acknowledged, so a
restarted master carries on from it and from the timelines. Calls into table servers
(recover these buckets, give those up) are made without holding the master's lock: a
table server answers them by calling back into the master.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import pyarrow as pa

from memtier.catalog import CatalogSync
from memtier.config import CatalogConfig, Evolution, ServicesConfig, TableOptions, load
from memtier.errors import (
    CommitFailedError,
    CommitStateUnknownError,
    FencedError,
    InvalidArgumentError,
    SchemaEvolutionError,
    TableExistsError,
    TableNotFoundError,
    TransactionError,
)
from memtier.exchange import FlushedBlock, TableLocation, TxnSnapshot
from memtier.hudi.adopt import check_adoptable, fits_buckets
from memtier.hudi.commit import CommitMetadata, WriteStat, is_avro_container
from memtier.hudi.evolution import Change, evolve, merge
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.heartbeat import Heartbeats
from memtier.hudi.lock import TableLock
from memtier.hudi.mdt import metadata_table_changed, trim_metadata_table
from memtier.hudi.mdtcompact import compact_files_partition
from memtier.hudi.mdtfiles import names_files_partition
from memtier.hudi.properties import DEFAULT_TABLE_VERSION
from memtier.hudi.table import HudiTable
from memtier.hudi.tablemeta import TableMeta
from memtier.hudi.timeline import COMMIT_ACTIONS, REPLACING_ACTIONS, Instant, State, new_instant_time
from memtier.hudi.writer import commit_action, commit_metadata, rollback_instant, rollback_pending
from memtier.io import join, open_fileio
from memtier.master.assignment import ServerLoad, place, rebalance_move
from memtier.master.commits import CommitLog, FileGroupRef, TimelineMark, can_conflict, written_file_groups
from memtier.master.foreign import WRITE_ACTIONS, foreign_conflicts, missed_by
from memtier.master.logwrites import LOG_WRITE, new_file_group_conflicts, settle_log_files
from memtier.master.services import TableServices
from memtier.master.state import (
    ABORTED,
    COMMITTED,
    OPEN,
    MasterState,
    MasterStore,
    TableEntry,
    Txn,
)
from memtier.master.tasks import COMPLETED, FAILED
from memtier.wal.fence import fence
from memtier.wal.stream import stream_directory

__all__ = ["COMPLETION_TIME_KEY", "FLUSHED_KEY", "Master", "ServerHandle", "validate_table_name"]

log = logging.getLogger(__name__)

#: Commit metadata key recording which blocks a flush wrote (so none is written twice).
FLUSHED_KEY = "memtier.flushed"
#: Commit metadata key recording when the master completed the instant (``yyyyMMddHHmmssSSS``,
#: after every instant and completion before: table version 6 has no completion time).
COMPLETION_TIME_KEY = "memtier.completionTime"
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_KEEP_COMMITTED_MS = 3_600_000  # a retried begin of a committed micro-batch finds it
_KEEP_ABORTED_MS = 7 * 86_400_000  # frames of aborted transactions wait in WALs this long


def validate_table_name(name: Any) -> str:
    """Table names are plain identifiers: never a path, so no path is built from them unchecked."""
    if not isinstance(name, str) or not _TABLE_NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"table name {name!r} is not a plain identifier (letters, digits, _; "
            "not starting with a digit; at most 128 characters)"
        )
    return name


class ServerHandle(Protocol):
    """The master's calls into one table server."""

    def acquire(self, table: str, buckets: Sequence[int], *, life: str | None = None) -> None:
        """Serve ``buckets`` (recovering them from the WAL); refused unless the server
        still lives ``life``."""
        ...

    def release(self, table: str, buckets: Sequence[int]) -> None: ...

    def fence_txn(self, txn_id: int) -> None:
        """Refuse further writes of a transaction that is being resolved."""
        ...

    def apply_schema(self, table: str, version: int) -> None:
        """Write the table under schema ``version`` (or a later one) from now on."""
        ...


@dataclass
class _Server:
    server_id: str
    location: str
    handle: ServerHandle
    memory_budget: int
    last_heartbeat: float
    max_batch_rows: int | None = None
    life: str = ""  # which life of the server this is (memtier.wal.fence)
    status: Mapping[str, Any] = field(default_factory=dict)
    bucket_memory: Mapping[tuple[str, int], int] = field(default_factory=dict)

    def load(self) -> ServerLoad:
        used = int(self.status.get("memory_used", 0))
        return ServerLoad(self.server_id, used, self.memory_budget, self.bucket_memory)


class Master:
    """One cluster's master; thread-safe."""

    def __init__(
        self,
        root: str,
        *,
        connect: Callable[[str, str], ServerHandle],
        storage_options: Mapping[str, str] | None = None,
        heartbeat_timeout: float = 5.0,
        writer_lease: float = 60.0,
        clock: Callable[[], float] = time.time,
        services: Mapping[str, str] | None = None,
        catalog: Mapping[str, str] | None = None,
        wal_root: str | None = None,
    ) -> None:
        """``root`` holds the master's state and, by default, the tables;
        ``connect(server_id, location)`` opens a handle on a table server; ``services``
        are the ``services.*`` settings (the table-service policies); ``catalog`` the
        ``catalog.*`` settings (the metastore tables are registered in); ``wal_root``
        where the table servers keep their WALs (default ``<root>/_memtier/wal``);
        ``writer_lease``: seconds after which an instant whose writer outside the tier
        stopped renewing its lease is rolled back."""
        self.root = root
        self._io = open_fileio(root, storage_options)
        self._wal_root = wal_root or join(root, "_memtier", "wal")
        self._wal_io = open_fileio(self._wal_root, storage_options)
        self._storage_options = dict(storage_options or {})
        self._store = MasterStore(self._io, join(root, "_memtier", "master", "state.json"))
        self._connect = connect
        self._heartbeat_timeout = heartbeat_timeout
        self._writer_lease = writer_lease
        self._clock = clock
        self._lock = threading.RLock()
        self._placement_lock = threading.Lock()  # one placement change at a time
        self._started = clock()
        #: Heartbeats missed before this (a start, or the master's own pause) count for nothing.
        self._heard_since = self._started
        self._state = self._store.load()
        self._servers: dict[str, _Server] = {}
        self._metas: dict[str, TableMeta] = {}
        #: table -> the clustering request converting its file groups into buckets
        self._converting: dict[str, int] = {}
        self._table_locks: dict[str, threading.Lock] = {}
        self._last_instant: dict[str, str] = {}
        self._latest_commit: dict[str, str | None] = {}
        self._flushed: dict[str, tuple[str | None, dict[tuple[str, str], int]]] = {}
        self._commit_logs: dict[str, CommitLog] = {}
        #: (table, base path) -> Hudi's table lock and the heartbeats of the master's instants
        self._shared: dict[tuple[str, str], tuple[TableLock, Heartbeats]] = {}
        self._lock_owner = uuid.uuid4().hex[:12]
        self.services = TableServices(self, services, clock)
        self.metrics_url: str | None = None  # where the process serves /metrics, if it does
        self.catalog = CatalogSync.from_config(load(CatalogConfig, catalog), storage_options)
        for name in list(self._state.tables):
            self._recover_table(name)
            self.catalog.table_added(name, self._meta(name))

    # == state ===========================================================================
    def _save(self, state: MasterState) -> None:
        """Persist, then adopt: nothing is acknowledged before it is durable."""
        self._store.save(state)
        self._state = state

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _table_lock(self, table: str) -> threading.Lock:
        with self._lock:
            return self._table_locks.setdefault(table, threading.Lock())

    def _entry(self, table: str) -> TableEntry:
        entry = self._state.tables.get(table)
        if entry is None:
            raise TableNotFoundError(f"no table named {table!r} (tables: {sorted(self._state.tables)})")
        return entry

    def _meta(self, table: str) -> TableMeta:
        """The table's meta, loaded once; Hudi's metadata table, if the table has one, keeps
        only its ``files`` partition or is dropped then (:mod:`memtier.hudi.mdt`)."""
        with self._lock:
            meta = self._metas.get(table)
            if meta is None:
                entry = self._entry(table)
                meta = trim_metadata_table(TableMeta.load(open_fileio(entry.path, entry.storage_options), entry.path))
                self._metas[table] = meta
            return meta

    def _trimmed_metadata_table(self, table: str, meta: TableMeta) -> TableMeta:
        """``meta``, once a metadata table (or partitions of it) a Hudi writer made since it
        was loaded is trimmed to what memtier keeps current."""
        if not metadata_table_changed(meta):
            return meta
        meta = trim_metadata_table(TableMeta.load(meta.io, meta.base_path))
        with self._lock:
            self._metas[table] = meta
        return meta

    def meta(self, table: str) -> TableMeta:
        """The table's Hudi metadata (config, schemas, storage)."""
        return self._meta(table)

    def _recover_table(self, table: str) -> None:
        """On start: roll back flushes left pending by a previous master; queue its
        pending table services again, and the conversion into buckets of file groups
        that do not fit them (a conversion a crash interrupted)."""
        meta = self._meta(table)
        lock, heartbeats = self._sharing(table, meta)
        if lock.clear_stale():
            log.warning("deleted the table lock of %s that a previous master left", table)
        now = self._clock()
        with lock.held():  # a pending instant whose Hudi writer is alive is its writer's
            timeline = rollback_pending(meta, keep=lambda i: heartbeats.live_foreign(i.timestamp, now))
        last = timeline.last_completed()
        self._latest_commit[table] = last.timestamp if last else None
        self._last_instant[table] = timeline.last_timestamp() or ""
        self.services.recover(table, meta)
        self._convert(table)

    # == catalog =========================================================================
    def create_table(
        self,
        name: str,
        schema: pa.Schema,
        record_key: str | Sequence[str] | None,
        *,
        ordering_field: str | None = None,
        partition_fields: str | Sequence[str] | None = None,
        buckets: int = 4,
        table_type: str = "MERGE_ON_READ",
        path: str | None = None,
        storage_options: Mapping[str, str] | None = None,
        log_block_format: str = "avro",
        table_version: int = DEFAULT_TABLE_VERSION,
        options: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Create a Hudi table (of Hudi table version ``table_version``) and serve it
        (``options``: the table's own, see :class:`~memtier.config.TableOptions`); its description."""
        validate_table_name(name)
        table_options = dict(options or {})
        TableOptions.parse(table_options)
        with self._lock:
            if name in self._state.tables:
                raise TableExistsError(f"table {name!r} already exists")
        table_path = path or join(self.root, "tables", name)
        options = dict(storage_options if storage_options is not None else (
            self._storage_options if path is None else {}))
        HudiTable.create(
            table_path, schema, record_key, ordering_field, partition_fields, buckets, table_type,
            options, name=name, log_block_format=log_block_format, table_version=table_version,
        )
        return self._add_table(name, table_path, options, table_options)

    def register_table(
        self, name: str, path: str, storage_options: Mapping[str, str] | None = None,
        buckets: int | None = None,
    ) -> dict[str, Any]:
        """Serve an existing Hudi table (memtier's or Apache Hudi's) under ``name``.

        A table without a bucket index (Hudi's default index) is served for reads only,
        unless ``buckets`` is given: then its file groups are converted into that many per
        partition by a clustering of the table-service pool (:mod:`memtier.hudi.adopt`);
        the description's ``conversion`` is that request, and writes wait for it (reads
        do not). A table memtier would write but cannot take is refused, naming what to do."""
        validate_table_name(name)
        with self._lock:
            if name in self._state.tables:
                raise TableExistsError(f"table {name!r} already exists")
        table = HudiTable.open(path, storage_options)  # refuses what is not a readable Hudi table
        if table.config.buckets is not None or buckets is not None:
            check_adoptable(table.meta)
        if table.config.buckets is None and buckets is not None:
            view = FileSystemView.build(table.io, table.path, table.timeline())
            table.set_bucket_index(buckets, convert=not fits_buckets(view, buckets))
        elif buckets is not None and buckets != table.config.buckets:
            raise InvalidArgumentError(
                f"table {table.config.name} at {path} has {table.config.buckets} buckets, not {buckets}"
            )
        return self._add_table(name, path, dict(storage_options or {}))

    def _convert(self, table: str) -> None:
        """Start converting the table's file groups into its buckets, if they do not fit them."""
        meta = self._meta(table)
        if not meta.config.buckets or fits_buckets(FileSystemView.build(meta.io, meta.base_path, meta.timeline()),
                                                   meta.config.buckets):
            self._converting.pop(table, None)
            return
        request = self.services.request(table, "clustering")
        if request is not None:
            self._converting[table] = request["request_id"]
            log.info("converting %s into %d buckets: clustering request %d", table, meta.config.buckets,
                     request["request_id"])

    def conversion(self, table: str) -> dict[str, Any] | None:
        """The clustering request converting ``table`` into buckets while it runs, else None
        (a failed one is requested again)."""
        request_id = self._converting.get(table)
        if request_id is None:
            return None
        try:
            request = self.services.request_status(request_id)
        except InvalidArgumentError:
            request = {"state": FAILED}  # forgotten: look at the table again
        if request["state"] in (FAILED, COMPLETED):
            self._convert(table)
            request_id = self._converting.get(table)
            return None if request_id is None else self.services.request_status(request_id)
        return request

    def _add_table(self, name: str, path: str, options: dict[str, str],
                   table_options: Mapping[str, str] | None = None) -> dict[str, Any]:
        entry = TableEntry(name, path, options, self._now_ms(), options=dict(table_options or {}))
        with self._lock:
            if name in self._state.tables:
                raise TableExistsError(f"table {name!r} already exists")
            self._save(self._state.with_table(entry))
        self._recover_table(name)
        self._place(name)
        self.catalog.table_added(name, self._meta(name))
        return self.describe_table(name)

    def drop_table(self, name: str, *, purge: bool = False) -> None:
        """Stop serving a table; with ``purge`` also delete its files and WALs."""
        with self._lock:
            entry = self._entry(name)
            owners = self._owners(name)
            self._save(self._state.without_table(name))
            self._metas.pop(name, None)
            self._commit_logs.pop(name, None)
        self.services.forget_table(name)
        for server_id, buckets in owners.items():
            server = self._servers.get(server_id)
            if server is not None:
                server.handle.release(name, sorted(buckets))
        if purge:
            self.catalog.table_dropped(name)
            open_fileio(entry.path, entry.storage_options).delete_dir(entry.path)
            self._wal_io.delete_dir(join(self._wal_root, name))

    def list_tables(self) -> list[str]:
        with self._lock:
            return sorted(self._state.tables)

    def table_location(self, table: str) -> TableLocation:
        with self._lock:
            entry = self._entry(table)
        return TableLocation(entry.name, entry.path, dict(entry.storage_options))

    def describe_table(self, name: str) -> dict[str, Any]:
        """Everything a client needs to route and read: schema, keys, placement."""
        with self._lock:
            entry = self._entry(name)
            routing = dict(self._state.assignments.get(name, {}))
            servers = {s: self._servers[s].location for s in set(routing.values()) if s in self._servers}
            limits = [self._servers[s].max_batch_rows for s in servers]
            max_batch_rows = min((n for n in limits if n is not None), default=None)
            epoch = self._state.epoch
        meta = self._meta(name)
        config = meta.config
        return {
            "name": name,
            "path": entry.path,
            "storage_options": dict(entry.storage_options),
            "schema": meta.schema.serialize().to_pybytes(),
            "record_key": list(config.record_key_fields),
            "ordering_field": config.ordering_field,
            "partition_fields": list(config.partition_fields),
            "buckets": config.buckets,
            "table_type": config.table_type,
            "conversion": self.conversion(name),
            "routing": {str(b): s for b, s in sorted(routing.items())},
            "servers": servers,
            "max_batch_rows": max_batch_rows,
            "epoch": epoch,
            "schema_version": meta.schema_version,
            "options": {"schema.evolution": _options(entry).schema_evolution.value},
        }

    # == schemas =========================================================================
    def alter_table(
        self, name: str, add_columns: Sequence[pa.Field] = (), widen: Mapping[str, pa.DataType] | None = None,
        options: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Add nullable columns (a dotted name adds inside a struct) and widen types
        (:mod:`memtier.hudi.evolution`), and set table ``options``: all of it, or nothing
        and :class:`SchemaEvolutionError` naming what may not change and why. A schema
        change is a new schema version, committed on the table's timeline (an
        ``ALTER_SCHEMA`` commit with the new writer schema, as Hudi's ``ALTER TABLE``
        writes one) and applied by every table server before this returns. The table's
        description."""
        with self._lock:
            entry = self._entry(name)
            merged = {**entry.options, **{str(k): str(v) for k, v in (options or {}).items()}}
        TableOptions.parse(merged)
        changed = self._change_schema(name, lambda meta: evolve(meta.schema, add_columns, widen, meta.roles))
        if merged != dict(entry.options):
            with self._lock:
                entry = self._entry(name)
                self._save(self._state.with_table(dataclasses.replace(entry, options=merged)))
        if changed:
            self._apply_schema(name)
        return self.describe_table(name)

    def evolve_schema(self, name: str, incoming: pa.Schema) -> dict[str, Any]:
        """Make the table take write batches of schema ``incoming``: its new columns and
        wider types evolve the table (as :meth:`alter_table`) unless its
        ``schema.evolution`` is off, when :class:`SchemaEvolutionError` names them. The
        table's description (unchanged when the batch fits already)."""
        with self._lock:
            evolution = _options(self._entry(name)).schema_evolution

        def merged(meta: TableMeta) -> tuple[pa.Schema, list[Change]]:
            schema, found = merge(meta.schema, incoming, meta.roles)
            if found and evolution is Evolution.OFF:
                raise SchemaEvolutionError(
                    f"table {name!r} has schema.evolution=off and the batch would change its schema "
                    f"({'; '.join(map(str, found))}): it was refused whole (alter the table first)"
                )
            return schema, found

        if self._change_schema(name, merged):
            self._apply_schema(name)
        return self.describe_table(name)

    def _change_schema(self, table: str, change: Callable[[TableMeta], tuple[pa.Schema, list[Change]]]) -> bool:
        """Commit the schema ``change(meta)`` makes of the table's, if it makes any (under
        the table's commit lock: every commit completing after it names the new schema,
        :meth:`complete_commit`); whether it did. A failure before the commit completed
        rolls it back: the table keeps its schema."""
        with self._table_lock(table):
            meta = self._meta(table)
            schema, found = change(meta)
            if not found:
                return False
            evolved = meta.with_schema(schema, meta.schema_version + 1)
            action = commit_action(meta)
            lock, heartbeats = self._sharing(table, meta)
            with lock.held():
                instant = self._request_locked(table, meta, action, "alter_table", [], b"")
                writer = meta.timeline_writer()
                try:
                    inflight = writer.inflight(Instant(instant, action, State.REQUESTED), b"")
                except Exception as e:
                    self._rollback_locked(table, meta, instant)
                    raise CommitFailedError(f"the schema change of {table} failed (rolled back): {e}") from e
                metadata = commit_metadata(evolved, [], "ALTER_SCHEMA",
                                           {COMPLETION_TIME_KEY: self._next_time(table)})
                try:
                    writer.complete(inflight, metadata.encode(meta.layout))
                except Exception as e:
                    with self._lock:
                        self._metas.pop(table, None)  # re-read from the timeline: the schema it holds
                    raise CommitStateUnknownError(
                        f"completing the schema change {instant} of {table} failed: {e}") from e
            self._commits(table).complete(instant, [])
            heartbeats.stop(instant)
            with self._lock:
                self._metas[table] = evolved
            self._latest_commit[table] = max(self._latest_commit.get(table) or "", instant)
        log.info("%s: schema version %d (%s)", table, evolved.schema_version, "; ".join(map(str, found)))
        self.catalog.table_added(table, evolved)  # the metastore's columns, as hive-sync alters them
        return True

    def _apply_schema(self, table: str) -> None:
        """Every table server writes the table under its newest schema from now on; one
        that cannot be told now learns it from its next heartbeat's answer."""
        version = self._meta(table).schema_version
        with self._lock:
            handles = [(s, info.handle) for s, info in self._servers.items()]
        for server_id, handle in handles:
            try:
                handle.apply_schema(table, version)
            except Exception:
                log.warning("could not tell %s of schema version %d of %s", server_id, version, table, exc_info=True)

    def schema_versions(self) -> dict[str, int]:
        """Each table's schema version."""
        return {name: self._meta(name).schema_version for name in self.list_tables()}

    # == table servers ===================================================================
    def register_server(
        self, server_id: str, location: str, memory_budget: int, max_batch_rows: int | None = None, *,
        life: str,
    ) -> None:
        """A table server (new, restarted with nothing in memory, or reset after losing
        its buckets) joins as ``life``: it gets back the buckets it owned (recovering them
        from the WAL) and takes unplaced ones. When it lived another life before, that
        life may still run somewhere (a paused process, a host cut off): its WAL streams
        are fenced first. A fenced life is refused (:class:`FencedError`): reset first."""
        handle = self._connect(server_id, location)
        with self._placement_lock:
            with self._lock:
                if life in self._state.fenced:
                    raise FencedError(
                        f"table server {server_id} registers as life {life}, which was fenced (taken for "
                        "dead, its buckets given to others): reset and register as a new life"
                    )
                previous = self._state.lives.get(server_id)
                self._servers[server_id] = _Server(
                    server_id, location, handle, memory_budget, self._clock(), max_batch_rows, life
                )
                tables = list(self._state.tables)
                owned = {t: sorted(b for b, s in self._state.assignments.get(t, {}).items() if s == server_id)
                         for t in tables}
                if previous != life:
                    self._save(self._state.with_life(server_id, life))
            if previous is not None and previous != life:
                self._fence(server_id, previous, [t for t, buckets in owned.items() if buckets],
                            by=f"{server_id} (life {life})")
            for table, buckets in owned.items():
                if buckets:
                    handle.acquire(table, buckets, life=life)
        for table in tables:
            self._place(table)

    def heartbeat(self, server_id: str, status: Mapping[str, Any],
                  bucket_memory: Mapping[tuple[str, int], int] | None = None, *,
                  life: str) -> dict[str, Any]:
        """A table server's life reports; unless it is the registered one the answer says
        to register again (``fenced``: after a reset, as that life lost its buckets; a
        life another replaced was fenced then)."""
        with self._lock:
            server = self._servers.get(server_id)
            if server is None or server.life != life:
                return {"registered": False, "fenced": life in self._state.fenced}
            server.last_heartbeat = self._clock()
            server.status = dict(status)
            if bucket_memory is not None:
                server.bucket_memory = dict(bucket_memory)
            epoch = self._state.epoch
        return {"registered": True, "epoch": epoch, "schemas": self.schema_versions()}

    def resumed(self, paused_s: float) -> None:
        """The master's own process could not run for ``paused_s`` seconds (stopped,
        starved, a frozen host): heartbeats it could not receive meanwhile count for
        nothing, so no server is taken for dead for them; each gets a heartbeat timeout
        from now."""
        log.warning("the master did not run for %.1fs: table servers get a heartbeat timeout from now", paused_s)
        with self._lock:
            self._heard_since = self._clock()

    def _in_grace(self) -> bool:
        """Just after a (re)start, owners that have not re-registered yet keep their buckets."""
        return self._clock() - self._started < self._heartbeat_timeout

    def check_servers(self) -> list[str]:
        """Declare servers silent for too long dead (and, a heartbeat timeout after a
        master restart, owners that never came back) and move their buckets to the
        others, which recover them from the WAL once the dead one's WAL streams are fenced
        (:meth:`_place`); the servers declared dead. Silence is counted from the newest of
        the last heartbeat and the master's last start or pause (:meth:`resumed`)."""
        now = self._clock()
        with self._lock:
            heard = self._heard_since
            dead = [s for s, info in self._servers.items()
                    if now - max(info.last_heartbeat, heard) > self._heartbeat_timeout]
            for server_id in dead:
                log.warning("table server %s missed heartbeats for %.1fs: moving its buckets",
                            server_id, now - self._servers[server_id].last_heartbeat)
                del self._servers[server_id]
            orphaned = [t for t, buckets in self._state.assignments.items()
                        if any(s not in self._servers for s in buckets.values())]
        if dead or (orphaned and not self._in_grace()):
            for table in orphaned:
                self._place(table)
        return dead

    def rebalance(self) -> tuple[str, int, str, str] | None:
        """Move one bucket off an overloaded server, if one is (and a server has room)."""
        with self._lock:
            loads = {s: info.load() for s, info in self._servers.items()}
            move = rebalance_move(self._state.assignments, loads)
        if move is None:
            return None
        self.move_bucket(*move)
        return move

    def move_bucket(self, table: str, bucket: int, source: str, target: str) -> None:
        """Move ``bucket`` of ``table`` from the live server ``source`` (which releases it)
        to ``target`` (which recovers it from the WAL). The new owner is saved before it
        takes the bucket: a master that dies at any point of the move leaves one owner
        once the servers register with the next (the saved one takes the bucket then;
        saved after, a target that took it would keep it beside the source, which takes
        it back). Until it has, the target refuses the bucket's writes and reads: clients
        retry."""
        self._servers[source].handle.release(table, [bucket])
        with self._lock:
            buckets = dict(self._state.assignments.get(table, {}))
            buckets[bucket] = target
            self._save(self._state.with_assignment(table, buckets))
        self._servers[target].handle.acquire(table, [bucket], life=self._servers[target].life)
        log.info("moved bucket %d of %s from %s to %s", bucket, table, source, target)

    def _owners(self, table: str) -> dict[str, set[int]]:
        owners: dict[str, set[int]] = {}
        for bucket, server_id in self._state.assignments.get(table, {}).items():
            owners.setdefault(server_id, set()).add(bucket)
        return owners

    def _place(self, table: str) -> None:
        """Give every bucket of ``table`` a live owner. A new owner recovers its buckets
        from the WAL (``acquire``) before the placement is published to clients."""
        meta = self._meta(table)
        if not meta.config.buckets:
            return  # read-only table (no bucket index): nothing to place
        with self._placement_lock:
            self._place_locked(table, meta.config.buckets)

    def _place_locked(self, table: str, bucket_count: int) -> None:
        with self._lock:
            current = dict(self._state.assignments.get(table, {}))
            loads = {s: info.load() for s, info in self._servers.items()}
            counts: dict[str, int] = {}
            for buckets in self._state.assignments.values():
                for server_id in buckets.values():
                    counts[server_id] = counts.get(server_id, 0) + 1
            placement = place(table, bucket_count, current, loads, counts)
            if self._in_grace():
                for bucket, owner in current.items():
                    if owner not in loads:  # not re-registered yet: it keeps its buckets
                        placement[bucket] = owner
            handles = {s: (info.handle, info.life) for s, info in self._servers.items()}
            # owners that lose buckets without giving them up: gone, or not heard of
            gone = {owner: self._state.lives.get(owner) for bucket, owner in current.items()
                    if placement.get(bucket) != owner and owner not in loads}
        moved: dict[str, list[int]] = {}
        for bucket, server_id in placement.items():
            if current.get(bucket) != server_id:
                moved.setdefault(server_id, []).append(bucket)
        if not moved:
            return
        for owner, life in gone.items():
            if life is None:
                log.warning("%s of %s: no life of %s is recorded (a master state from before fencing); "
                            "its WAL streams are not fenced", table, owner, owner)
            else:
                self._fence(owner, life, [table], by=", ".join(sorted(moved)))
        for server_id, buckets in moved.items():
            handle, life = handles[server_id]
            handle.acquire(table, sorted(buckets), life=life)
        with self._lock:
            self._save(self._state.with_assignment(table, placement))

    def _fence(self, server_id: str, life: str, tables: Sequence[str], *, by: str) -> None:
        """Fence ``life`` of table server ``server_id`` in the WAL streams of ``tables``
        (:mod:`memtier.wal.fence`): from now on it acknowledges no write and commits no
        flush, and recovery reads of its segments only what it could have acknowledged.
        Recorded first, so its first heartbeat tells it to reset. Its flushes still
        pending are rolled back (they could never complete, and would keep the table
        services off their file groups)."""
        with self._lock:
            self._save(self._state.with_fenced(life))
        for table in tables:
            fence(self._wal_io, stream_directory(self._wal_root, table), life, server=server_id, by=by)
            with self._table_lock(table):
                for instant in self._commits(table).begun_by(life):
                    log.warning("rolling back %s of %s: %s (life %s) was fenced", instant, table, server_id, life)
                    self._rollback_locked(table, self._meta(table), instant)

    # == transactions ====================================================================
    def begin_txn(self, table: str, writer: str, batch: str) -> dict[str, Any]:
        """A transaction for one micro-batch of one writer. Beginning the same
        ``(writer, batch)`` again returns the same id and its state (retries are safe)."""
        with self._lock:
            self._entry(table)
            found = self._state.find_txn(table, writer, batch)
            if found is not None:
                return {"txn_id": found.txn_id, "state": found.state}
            now = self._now_ms()
            state = self._state.pruned(now, _KEEP_COMMITTED_MS, _KEEP_ABORTED_MS)
            txn = Txn(state.next_txn, table, writer, batch, OPEN, now)
            self._save(state.with_txn(txn))
            return {"txn_id": txn.txn_id, "state": OPEN}

    def _end_txn(self, txn_id: int, outcome: str) -> str:
        """Resolve a transaction: first every table server refuses further writes of it
        (so no late row joins it), then the outcome is made durable."""

        def check() -> Txn | None:
            txn = self._state.txns.get(txn_id)
            if txn is None:
                raise TransactionError(f"transaction {txn_id} is unknown (never begun, or long resolved)")
            if txn.state == outcome:
                return None  # a retried commit/abort
            if txn.state != OPEN:
                raise TransactionError(f"transaction {txn_id} is already {txn.state}")
            return txn

        with self._lock:
            if check() is None:
                return outcome
            handles = [info.handle for info in self._servers.values()]
        for handle in handles:
            try:
                handle.fence_txn(txn_id)
            except Exception:  # an unreachable server refreshes its view when it is back
                log.warning("could not fence transaction %d on a table server", txn_id, exc_info=True)
        with self._lock:
            txn = check()
            if txn is None:
                return outcome
            ended = Txn(txn.txn_id, txn.table, txn.writer, txn.batch, outcome, txn.began_ms, self._now_ms())
            self._save(self._state.with_txn(ended))
            return outcome

    def commit_txn(self, txn_id: int) -> str:
        """Make every row of the transaction visible to committed readers, atomically."""
        return self._end_txn(txn_id, COMMITTED)

    def abort_txn(self, txn_id: int) -> str:
        return self._end_txn(txn_id, ABORTED)

    def txn_snapshot(self) -> TxnSnapshot:
        with self._lock:
            return self._state.snapshot()

    # == the commit path ================================================================
    # Every instant any writer puts on a table's timeline goes through these calls:
    # begin (requested) -> inflight (naming its files) -> complete, or abort (rollback).

    def _commits(self, table: str) -> CommitLog:
        with self._lock:
            return self._commit_logs.setdefault(table, CommitLog())

    def begin_commit(
        self, table: str, action: str, *, owner: str,
        file_groups: Sequence[FileGroupRef] = (), plan: bytes = b"", life: str | None = None,
        leased: bool = False,
    ) -> str:
        """A new instant of ``action`` on the table's timeline, requested (holding
        ``plan``, e.g. a compaction plan); ``owner`` names the writer in conflict
        reports, ``file_groups`` (partition, file id) are those it will write, as far
        as it knows them yet. A table server's flush names its ``life``: refused
        (:class:`FencedError`) once that life lost its buckets. A ``leased`` one (a
        writer outside the tier: a Spark backfill) is rolled back once its writer has
        not renewed it (:meth:`renew_commit`) for the writer lease."""
        meta = self._meta(table)
        self._check_life(life, f"{action} of {table} by {owner}")
        with self._table_lock(table):
            instant = self._request_locked(table, meta, action, owner, _refs(file_groups), plan, life,
                                           self._clock() if leased else None)
        log.debug("%s %s of %s by %s requested", action, instant, table, owner)
        return instant

    def begin_planned(
        self, table: str, action: str, owner: str,
        make_plan: Callable[[Collection[FileGroupRef]], tuple[bytes, list[FileGroupRef]] | None],
    ) -> tuple[str, list[FileGroupRef]] | None:
        """:meth:`begin_commit` with a plan made under the table's commit lock:
        ``make_plan(busy)`` sees the file groups pending instants touch (none of which
        can change until the plan is requested) and returns (plan, file groups), or None
        for nothing to do. The instant and the plan's file groups, or None."""
        meta = self._meta(table)
        with self._table_lock(table):
            made = make_plan(self._commits(table).pending_file_groups())
            if made is None:
                return None
            plan, file_groups = made
            instant = self._request_locked(table, meta, action, owner, file_groups, plan)
        return instant, file_groups

    def _sharing(self, table: str, meta: TableMeta) -> tuple[TableLock, Heartbeats]:
        """The table lock Hudi's writers share and the heartbeats of the master's instants
        (:mod:`memtier.hudi.lock`, :mod:`memtier.hudi.heartbeat`)."""
        with self._lock:
            key = (table, meta.base_path)
            if key not in self._shared:
                self._shared[key] = (TableLock(meta.io, meta.base_path, self._lock_owner),
                                     Heartbeats(meta.io, meta.base_path, self._clock))
            return self._shared[key]

    def _request_locked(
        self, table: str, meta: TableMeta, action: str, owner: str, refs: list[FileGroupRef], plan: bytes,
        life: str | None = None, leased_at: float | None = None,
    ) -> str:
        """Request a new instant, its time made under Hudi's table lock as Hudi's writers
        make theirs, its heartbeat written before it shows on the timeline."""
        lock, heartbeats = self._sharing(table, meta)
        with lock.held():
            timeline = meta.timeline()
            instant = self._next_time(table, timeline.last_timestamp() or "")
            heartbeats.start(instant)
            try:
                meta.timeline_writer().request(instant, action, plan)
            except BaseException:
                heartbeats.stop(instant)
                raise
            self._wait_past(instant)
        self._commits(table).begin(instant, action, owner, refs, life, leased_at, TimelineMark.of(timeline))
        return instant

    def _wait_past(self, instant: str) -> None:
        """Hold on (under the table lock) until the clock is past ``instant``, so that a
        Hudi writer taking the lock next makes a later time (a few ms at most)."""
        for _ in range(20):
            if new_instant_time(None, lambda: _utc(self._clock())) > instant:
                return
            time.sleep(0.0005)

    def compact_metadata_table(self, table: str, max_delta_commits: int) -> str | None:
        """Compact the ``files`` partition of the table's Hudi metadata table once
        ``max_delta_commits`` deltacommits completed since its last compaction, or finish
        one a crash left (:mod:`memtier.hudi.mdtcompact`), under the locks every write of
        the metadata table holds (commits wait meanwhile); its instant, or None. Its
        instant time is taken as the master's own are, so no later instant reuses it."""
        meta = self._meta(table)
        if not names_files_partition(meta.config):
            return None
        lock, _ = self._sharing(table, meta)
        with self._table_lock(table), lock.held():
            timeline = meta.timeline()
            instant = compact_files_partition(
                meta.io, meta.base_path, timeline,
                lambda after: self._next_time(table, max(after, timeline.last_timestamp() or "")), max_delta_commits)
            if instant is not None:
                self._wait_past(instant)
        return instant

    def renew_commit(self, table: str, instant: str) -> None:
        """The writer of a leased instant is alive; :class:`CommitFailedError` once the
        instant is no longer pending (rolled back when its lease lapsed, say)."""
        with self._table_lock(table):
            self._commits(table).renew(instant, self._clock())

    def check_commits(self) -> list[str]:
        """Renew the Hudi heartbeats of the master's pending instants that are due, and
        roll back leased instants whose writer went silent for the writer lease (a Spark
        driver killed mid-backfill); the instants rolled back. A table busy
        committing is looked at on the next check (the monitor never waits on it)."""
        with self._lock:
            tables = [t for t in self._commit_logs if t in self._state.tables]
        rolled = []
        for table in tables:
            lock = self._table_lock(table)
            if not lock.acquire(blocking=False):
                continue
            try:
                meta = self._meta(table)
                self._sharing(table, meta)[1].renew()
                lapsed = self._commits(table).lapsed(self._clock(), self._writer_lease, self._heard_since)
                for instant, owner, silent in lapsed:
                    log.warning("rolling back %s of %s: its writer %s was not heard for %.0fs", instant, table,
                                owner, silent)
                    self._rollback_locked(table, meta, instant)
                    rolled.append(instant)
            finally:
                lock.release()
        return rolled

    def adopt_pending(self, table: str, instant: str, action: str, owner: str,
                      file_groups: Sequence[FileGroupRef]) -> None:
        """Take an instant left pending on the timeline (by a previous master) into the
        commit path again, as if just begun."""
        with self._table_lock(table):
            self._commits(table).begin(instant, action, owner, _refs(file_groups))

    def start_pending(self, table: str, instant: str) -> None:
        """Move a requested table-service instant to inflight (a clean's inflight holds
        its plan, as Hudi's does); one already inflight stays as it is."""
        meta = self._meta(table)
        with self._table_lock(table):
            action = self._commits(table).pending(instant)
            timeline = meta.timeline()
            found = [i for i in timeline.pending(None) if i.timestamp == instant and i.action == action]
            if not found:
                raise CommitFailedError(f"{action} {instant} of {table} is not pending on the timeline")
            if found[0].state is State.REQUESTED:
                content = meta.io.read_bytes(timeline.instant_path(meta.base_path, found[0])) \
                    if action == "clean" else b""
                meta.timeline_writer().inflight(found[0], content)

    def revert_to_requested(self, table: str, instant: str) -> None:
        """Undo a failed attempt of a compaction: its files deleted, the instant back to
        requested (a rollback recorded), still pending here, to be executed again."""
        meta = self._meta(table)
        with self._table_lock(table):
            timeline = meta.timeline()
            for pending in timeline.pending(("compaction",)):
                if pending.timestamp == instant and pending.state is State.INFLIGHT:
                    rollback_instant(meta, pending, timeline)

    def commit_inflight(
        self, table: str, instant: str, planned: bytes = b"", file_groups: Sequence[FileGroupRef] = (),
        *, life: str | None = None,
    ) -> None:
        """Move a begun instant to inflight; ``planned`` names every file it will write
        (what a rollback deletes), ``file_groups`` adds to those it touches. Refused
        (:class:`FencedError`) once a table server's ``life`` lost its buckets."""
        meta = self._meta(table)
        with self._table_lock(table):
            self._check_life(life, f"making {instant} of {table} inflight")
            commits = self._commits(table)
            action = commits.pending(instant)
            commits.touch(instant, _refs(file_groups))
            meta.timeline_writer().inflight(Instant(instant, action, State.REQUESTED), _for_layout(meta, planned))

    def complete_commit(
        self, table: str, instant: str, content: bytes | CommitMetadata, *,
        file_groups: Sequence[FileGroupRef] = (), check_conflicts: bool | Sequence[str] = False,
        life: str | None = None,
    ) -> None:
        """Complete a begun, inflight instant with ``content`` (its commit metadata).

        With ``check_conflicts`` (optimistic concurrency, as Hudi's): if another instant
        touched one of its file groups since it began (completed since, or still
        pending), it is rolled back instead (its files deleted, nothing visible) and
        :class:`CommitFailedError` names the other instants. A list of actions checks
        against instants of those actions only; pairs that cannot conflict (a log write
        and a compaction) never do. A log write's files take their place in completion
        order first (:mod:`memtier.master.logwrites`, which also says what conflicts
        there regardless). Commit metadata records when it completed
        (:data:`COMPLETION_TIME_KEY`) and the table's schema as of then (so the newest
        commit names the newest schema, whatever it was planned under). With ``life``, the instant's owner is a table
        server that must still live it: if it lost its buckets meanwhile the instant is
        rolled back and :class:`FencedError` says why. A failure writing the completed
        file raises :class:`CommitStateUnknownError`.
        """
        meta = self._meta(table)
        refs = _refs(file_groups)
        lock, heartbeats = self._sharing(table, meta)
        with self._table_lock(table), lock.held():
            try:
                self._check_life(life, f"completing {instant} of {table}")
            except FencedError:
                self._rollback_locked(table, meta, instant)
                raise
            commits = self._commits(table)
            action = commits.pending(instant)
            metadata = _commit_metadata(content)
            found = []
            if check_conflicts:
                found = commits.conflicts(instant, refs, None if check_conflicts is True else list(check_conflicts))
            if action == LOG_WRITE and metadata is not None:
                found += new_file_group_conflicts(commits, instant, metadata)
            if action in WRITE_ACTIONS:
                found += self._foreign_conflicts(meta, commits, heartbeats, instant, action, refs, metadata)
            if found:
                self._rollback_locked(table, meta, instant)
                raise CommitFailedError(
                    f"{action} {instant} of {table} conflicts with concurrent writes and was rolled "
                    f"back (nothing of it is visible): {'; '.join(found)}"
                )
            data = content if isinstance(content, bytes) else b""
            if action != "clean":
                meta = self._trimmed_metadata_table(table, meta)
            if metadata is not None:
                if action == LOG_WRITE:
                    metadata = settle_log_files(meta, commits, instant, metadata, refs)
                stamp = {**self._meta(table).schema_metadata(), COMPLETION_TIME_KEY: self._next_time(table)}
                data = dataclasses.replace(metadata, extra_metadata={**metadata.extra_metadata, **stamp}).encode(meta.layout)
            inflight = Instant(instant, action, State.INFLIGHT)
            try:
                done = meta.timeline_writer().complete(inflight, data)
            except Exception as e:
                raise CommitStateUnknownError(f"completing {action} {instant} of {table} failed: {e}") from e
            commits.complete(instant, refs)
            heartbeats.stop(instant)
            if done.action in COMMIT_ACTIONS:
                self._latest_commit[table] = max(self._latest_commit.get(table) or "", instant)
        if done.action in COMMIT_ACTIONS:
            self.catalog.committed(table, meta, data)

    def _foreign_conflicts(
        self, meta: TableMeta, commits: CommitLog, heartbeats: Heartbeats, instant: str, action: str,
        refs: list[FileGroupRef], metadata: CommitMetadata | None,
    ) -> list[str]:
        """Conflicts of a pending instant with Hudi writers' (under the table lock):
        their instants completed since it began that wrote its file groups, or a live
        Hudi writer whose own check would miss it (:mod:`memtier.master.foreign`)."""
        mark, touched = commits.began(instant)
        timeline = meta.timeline()
        groups = touched | set(refs) | (written_file_groups(metadata.write_stats()) if metadata else set())
        found = [] if mark is None else foreign_conflicts(meta, timeline, instant, action, mark, groups,
                                                          commits.completed_here)
        ours = commits.pending_instants()
        now = self._clock()
        live = [i.timestamp for i in timeline.pending() if i.timestamp not in ours
                and can_conflict(action, i.action) and heartbeats.live_foreign(i.timestamp, now)]
        missed = missed_by(timeline, instant, live)
        return found + ([missed] if missed else [])

    def _next_time(self, table: str, after: str = "") -> str:
        """A new instant or completion time of ``table`` (under its commit lock), recorded:
        after ``after`` and every instant and completion this master made before."""
        made = new_instant_time(max(after, self._last_instant.get(table, "")) or None, lambda: _utc(self._clock()))
        self._last_instant[table] = made
        return made

    def _check_life(self, life: str | None, what: str) -> None:
        """Refuse ``what`` of a table server's ``life`` (None: not a table server's) once
        that life lost its buckets: taken for dead, or replaced by a newer life."""
        if life is None:
            return
        with self._lock:
            if any(server.life == life for server in self._servers.values()):
                return
        raise FencedError(
            f"{what} refused: table server life {life} lost its buckets to another (its server "
            "was taken for dead); it commits nothing more for them"
        )

    def abort_commit(self, table: str, instant: str, planned: bytes = b"") -> None:
        """Roll a begun instant back (its files deleted; a rollback instant recorded);
        ``planned`` (inflight content) names files it wrote that its inflight does not
        name yet. A no-op for an instant no longer pending (already rolled back, say by
        its failed completion)."""
        meta = self._meta(table)
        with self._table_lock(table):
            action = self._commits(table).pending_instants().get(instant)
            requested = Instant(instant, action or "", State.REQUESTED)
            if planned and action is not None and requested in meta.timeline().pending(None):
                meta.timeline_writer().inflight(requested, _for_layout(meta, planned))
            self._rollback_locked(table, meta, instant)

    def _rollback_locked(self, table: str, meta: TableMeta, instant: str) -> None:
        self._commits(table).forget(instant)
        lock, heartbeats = self._sharing(table, meta)
        with lock.held():
            timeline = meta.timeline()
            for pending in timeline.pending(None):
                if pending.timestamp == instant and pending.action != "rollback":
                    rollback_instant(meta, pending, timeline)
        heartbeats.stop(instant)

    def complete_flush(
        self, table: str, instant: str, stats: Sequence[Mapping[str, Any]], flushed: Sequence[FlushedBlock],
        *, life: str | None = None,
    ) -> None:
        """Complete a table server's flush (a deltacommit), recording its blocks in the
        commit metadata so that none is flushed twice; refused, and rolled back, once
        the server's ``life`` lost its buckets (:class:`FencedError`)."""
        meta = self._meta(table)
        write_stats = [WriteStat.from_dict(dict(s)) for s in stats]
        extra = {FLUSHED_KEY: json.dumps([f.to_list() for f in flushed])}
        metadata = commit_metadata(meta, write_stats, "UPSERT", extra)
        touched = [(s.partition_path, s.file_id) for s in write_stats]
        # a clustering that replaced one of these file groups meanwhile wins: the blocks
        # stay unflushed and go, next round, to the file group now holding their bucket
        self.complete_commit(table, instant, metadata, file_groups=touched, check_conflicts=REPLACING_ACTIONS,
                             life=life)
        with self._table_lock(table):
            cached = self._flushed.get(table)
            if cached is not None:
                scanned, marks = cached
                for block in flushed:
                    key = (block.partition, block.file_id)
                    marks[key] = max(marks.get(key, 0), block.block_id)

    def flushed_blocks(self, table: str) -> list[FlushedBlock]:
        """The last flushed block of each file group, from the completed flushes' metadata."""
        meta = self._meta(table)
        with self._table_lock(table):
            scanned, marks = self._flushed.get(table, (None, {}))
            timeline = meta.timeline()
            for instant in timeline.completed(("deltacommit",)):
                if scanned is not None and instant.timestamp <= scanned:
                    continue
                extra = timeline.read_commit_metadata(meta.io, meta.base_path, instant).extra_metadata
                for item in json.loads(extra.get(FLUSHED_KEY, "[]")):
                    block = FlushedBlock.from_list(item)
                    key = (block.partition, block.file_id)
                    marks[key] = max(marks.get(key, 0), block.block_id)
            last = timeline.last_completed()
            self._flushed[table] = (last.timestamp if last else scanned, marks)
            return [FlushedBlock(p, f, b) for (p, f), b in sorted(marks.items())]

    def latest_commit(self, table: str) -> str | None:
        """The newest completed instant of the table (flushes go through this master)."""
        with self._lock:
            self._entry(table)
        if table not in self._latest_commit:
            self._recover_table(table)
        return self._latest_commit.get(table)

    # == reads and status ================================================================
    def read_plan(self, table: str, as_of: str | None = None) -> dict[str, Any]:
        """One consistent point to read at: the table's latest instant, the committed
        transactions, and which server holds which bucket; with a lease on the file
        slices of that instant (or of ``as_of``, for time travel) that the reader gives
        back with :meth:`release_lease` (cleaning keeps them until then, or until the
        lease expires).

        ``pending``: the deltacommits up to that instant still pending (flushes of
        different servers complete out of order): the reader reads them as pending
        whenever they complete, and table servers answer for the blocks they flush as
        unflushed (read after ``instant``, so any instant up to it missing from them had
        completed on the timeline by then)."""
        description = self.describe_table(table)
        instant = self.latest_commit(table)
        pending = self._commits(table).pending_log_writes
        return {
            **description,
            "instant": instant,
            "pending": sorted(p for p in pending if instant is not None and p <= instant),
            "snapshot": self.txn_snapshot().to_dict(),
            "lease": self.services.lease(table, as_of or instant),
        }

    def release_lease(self, lease: int) -> None:
        """A read has ended: its file slices may be cleaned."""
        self.services.release(lease)

    # == table services ==================================================================
    def schedule_service(
        self, table: str, kind: str, *, partitions: Sequence[str] | None = None,
        sort_columns: Sequence[str] = (),
    ) -> dict[str, Any] | None:
        """A compaction (of every slice with log files), clustering or clean of the table,
        now: the request, whose tasks are those it planned and the pending ones it joined
        (:meth:`service_request` follows it), or None when there is nothing to do."""
        with self._lock:
            self._entry(table)
        return self.services.request(table, kind, partitions=partitions, sort_columns=sort_columns)

    def service_request(self, request_id: int) -> dict[str, Any]:
        return self.services.request_status(request_id)

    def service_task(self, task_id: int) -> dict[str, Any]:
        return self.services.task(task_id)

    def check_services(self) -> None:
        """Periodic: policies, compaction debt, tasks of silent pool actors."""
        self.services.check(self.list_tables())

    def service_worker_started(self, worker: str, cpus: str | None = None) -> None:
        self.services.worker_started(worker, cpus)

    def next_service_task(self, worker: str) -> dict[str, Any] | None:
        return self.services.next_task(worker)

    def service_progress(self, task_id: int, worker: str, done: int, total: int) -> bool:
        return self.services.progress(task_id, worker, done, total)

    def finish_service_task(
        self, task_id: int, worker: str, content: bytes | None, error: str | None = None,
        file_groups: Sequence[FileGroupRef] = (),
    ) -> dict[str, Any]:
        return self.services.finish(task_id, worker, content, error, _refs(file_groups))

    def sync_catalog(self, table: str, metastore: str | None = None,
                     database: str | None = None) -> dict[str, Any]:
        """Register the table and its partitions in ``metastore`` (a Trino file-metastore
        directory or a Hive Metastore's ``thrift://`` URI; by default the cluster's
        ``catalog.file-metastore`` or ``catalog.hive-metastore``) now; what it did."""
        with self._lock:
            self._entry(table)
        return self.catalog.sync(table, self._meta(table), metastore, database).to_dict()

    def service_overrides(self, table: str) -> dict[str, str]:
        with self._lock:
            return dict(self._entry(table).services)

    def set_services(self, table: str, options: Mapping[str, str]) -> dict[str, str]:
        """Set the table's own ``services.*`` settings (over the cluster's); all of them."""
        with self._lock:
            entry = self._entry(table)
            merged = {**entry.services, **{str(k): str(v) for k, v in options.items()}}
            bad = sorted(k for k in merged if not k.startswith("services."))
            if bad:
                raise InvalidArgumentError(f"table service settings start with 'services.', not {bad}")
            load(ServicesConfig, merged)  # refuses unknown keys and bad values
            self._save(self._state.with_table(dataclasses.replace(entry, services=merged)))
            return merged

    def status(self) -> dict[str, Any]:
        now = self._clock()
        with self._lock:
            servers = {
                s: {
                    "location": info.location,
                    "life": info.life,
                    "heartbeat_age_s": round(now - info.last_heartbeat, 3),
                    "memory_used": info.status.get("memory_used", 0),
                    "memory_budget": info.memory_budget,
                    "writes": info.status.get("writes", {}),
                    "wal_syncs": info.status.get("wal_syncs", {}),
                    "flushes": info.status.get("flushes", {}),
                    "metrics_url": info.status.get("metrics_url"),
                    "cpus": info.status.get("cpus"),
                    "flush_cpus": info.status.get("flush_cpus"),
                    "tables": info.status.get("tables", {}),
                }
                for s, info in sorted(self._servers.items())
            }
            tables = {
                name: {"path": entry.path, "buckets": len(self._state.assignments.get(name, {}))}
                for name, entry in sorted(self._state.tables.items())
            }
            open_txns = sorted(self._state.snapshot().open)
        for name, info in tables.items():
            info["latest_commit"] = self._latest_commit.get(name)
            info["services"] = self.services.status(name)
            unflushed = [s["tables"].get(name, {}) for s in servers.values()]
            info["unflushed_rows"] = sum(u.get("unflushed_rows", 0) for u in unflushed)
            info["lag_s"] = max((u.get("oldest_unflushed_s", 0.0) for u in unflushed), default=0.0)
        return {"servers": servers, "tables": tables, "open_transactions": open_txns,
                "pool": self.services.workers(), "metrics_url": self.metrics_url}

    def servers(self) -> dict[str, str]:
        with self._lock:
            return {s: info.location for s, info in self._servers.items()}


def _options(entry: TableEntry) -> TableOptions:
    return TableOptions.parse(entry.options)


def _commit_metadata(content: bytes | CommitMetadata) -> CommitMetadata | None:
    """Commit metadata to complete with, None for other content (a clean's Avro metadata)."""
    if isinstance(content, CommitMetadata):
        return content
    return None if not content.strip() or is_avro_container(content) else CommitMetadata.from_json(content)


def _for_layout(meta: TableMeta, content: bytes) -> bytes:
    """Instant content as the table's timeline layout encodes it: commit metadata, which
    writers send as JSON, becomes Avro on layout 2; other content stays as it is."""
    metadata = _commit_metadata(content)
    return content if metadata is None else metadata.encode(meta.layout)


def _refs(file_groups: Sequence[Sequence[str]]) -> list[FileGroupRef]:
    """File groups as (partition, file id) tuples (RPC delivers them as lists)."""
    return [(str(p), str(f)) for p, f in file_groups]


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)
