"""The memtier client: create tables, write (auto-commit or in transactions), read the
freshest rows (memory, then WAL, then files, merged per file group), look keys up.

A :class:`Client` talks to a master and to table servers through two small interfaces
that the core objects (in-process) and their RPC proxies (any process: no Ray needed)
both offer, so the same client code runs in tests and against a cluster.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memtier.errors import (
    BatchTooLargeError,
    InvalidArgumentError,
    MemtierError,
    NotFoundError,
    NotOwnerError,
    RpcError,
    TableConvertingError,
    TransactionError,
    UnsupportedTableError,
)
from memtier.exchange import AUTOCOMMIT, TxnSnapshot
from memtier.hudi.avro import META_FIELDS
from memtier.hudi.cache import SliceCache
from memtier.hudi.deletes import DELETE_FLAG, prepare_write
from memtier.hudi.evolution import Roles, merge
from memtier.hudi.filters import Filter, key_buckets, key_filters, validate
from memtier.hudi.keys import KeyColumns, bucket_ids, whole
from memtier.hudi.merge import LogEntry
from memtier.hudi.properties import DEFAULT_TABLE_VERSION
from memtier.hudi.reader import read_columns, read_instants, read_table
from memtier.hudi.routing import file_group_order, producer_bucket
from memtier.hudi.rows import take_rows
from memtier.hudi.schema import to_table
from memtier.hudi.slicereader import conform_columns
from memtier.hudi.tablemeta import RECORD_KEY, TableMeta
from memtier.hudi.timeline import Timeline
from memtier.io import open_fileio
from memtier.parallel import Prefetch
from memtier.tableserver.server import FILE_ID_COLUMN, PARTITION_COLUMN, UNRESOLVED, WriteAck

__all__ = ["Client", "MasterAPI", "ReadPlan", "ReadRequest", "ServerAPI", "Transaction", "WriteResult",
           "wait_for_request"]

log = logging.getLogger(__name__)
T = TypeVar("T")

READ_MODES = ("latest", "committed", "read_optimized", "incremental")
#: How long a write keeps retrying while table servers restart or buckets move.
RETRY_SECONDS = 30.0


class MasterAPI(Protocol):
    """What the client calls on the master (a :class:`~memtier.master.Master` or its proxy)."""

    def create_table(self, name: str, schema: pa.Schema, record_key: Any, **options: Any) -> dict[str, Any]: ...
    def alter_table(self, name: str, add_columns: Sequence[pa.Field] = (),
                    widen: Mapping[str, pa.DataType] | None = None,
                    options: Mapping[str, str] | None = None) -> dict[str, Any]: ...
    def evolve_schema(self, name: str, incoming: pa.Schema) -> dict[str, Any]: ...
    def register_table(self, name: str, path: str, storage_options: Mapping[str, str] | None = None,
                       buckets: int | None = None) -> dict[str, Any]: ...
    def drop_table(self, name: str, *, purge: bool = False) -> None: ...
    def list_tables(self) -> list[str]: ...
    def describe_table(self, name: str) -> dict[str, Any]: ...
    def read_plan(self, table: str, as_of: str | None = None) -> dict[str, Any]: ...
    def release_lease(self, lease: int) -> None: ...
    def schedule_service(self, table: str, kind: str, *, partitions: Sequence[str] | None = None,
                         sort_columns: Sequence[str] = ()) -> dict[str, Any] | None: ...
    def service_request(self, request_id: int) -> dict[str, Any]: ...
    def service_task(self, task_id: int) -> dict[str, Any]: ...
    def set_services(self, table: str, options: Mapping[str, str]) -> dict[str, str]: ...
    def sync_catalog(self, table: str, metastore: str | None = None,
                     database: str | None = None) -> dict[str, Any]: ...
    def begin_txn(self, table: str, writer: str, batch: str) -> dict[str, Any]: ...
    def commit_txn(self, txn_id: int) -> str: ...
    def abort_txn(self, txn_id: int) -> str: ...
    def status(self) -> dict[str, Any]: ...


class ServerAPI(Protocol):
    """What the client calls on a table server (the object or its proxy)."""

    def write(self, table: str, data: Any, *, txn_id: int, producer_id: bytes, producer_seq: int) -> WriteAck: ...
    def read(self, table: str, *, as_of_instant: str | None, snapshot: TxnSnapshot | None = None,
             committed_only: bool = False, columns: list[str] | None = None,
             buckets: Any = None, key_filters: Sequence[Filter] = (), schema_version: int | None = None,
             ) -> pa.Table: ...
    def flush(self, table: str | None = None, *, seal: bool = False) -> list[str]: ...


@dataclass(frozen=True)
class WriteResult:
    """A write's acknowledgement, summed over the table servers it went to."""

    rows: int
    duplicate_rows: int
    file_groups: int
    evicted_bytes: int
    seconds: float
    sequence: int  # the producer sequence number: pass it to write() to retry this write


@dataclass(frozen=True)
class _Routing:
    """A table as the client routes it (from the master's description)."""

    name: str
    schema: pa.Schema
    record_key: tuple[str, ...]
    ordering_field: str | None
    partition_fields: tuple[str, ...]
    buckets: int
    routing: Mapping[int, str]  # bucket -> server id
    servers: Mapping[str, str]  # server id -> location
    max_batch_rows: int | None
    conversion: Mapping[str, Any] | None = None  # the clustering converting it into buckets
    schema_version: int = 0

    @classmethod
    def of(cls, description: Mapping[str, Any]) -> _Routing:
        return cls(
            description["name"],
            _schema(description["schema"]),
            tuple(description["record_key"]),
            description.get("ordering_field"),
            tuple(description.get("partition_fields") or ()),
            int(description["buckets"] or 0),
            {int(b): s for b, s in description["routing"].items()},
            dict(description["servers"]),
            description.get("max_batch_rows"),
            description.get("conversion"),
            int(description.get("schema_version", 0)),
        )

    @property
    def roles(self) -> Roles:
        return Roles(self.record_key, self.partition_fields, self.ordering_field)

    def location(self, server_id: str) -> str:
        location = self.servers.get(server_id)
        if location is None:  # e.g. a restarted master the server has not re-registered with
            raise NotOwnerError(f"table server {server_id} of {self.name!r} is not registered (yet)")
        return location

    def server_buckets(self) -> dict[str, list[int]]:
        owned: dict[str, list[int]] = {}
        for bucket, server in sorted(self.routing.items()):
            owned.setdefault(server, []).append(bucket)
        return owned


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


class Client:
    """A connection to one memtier cluster; thread-safe."""

    def __init__(
        self,
        master: MasterAPI,
        server: Callable[[str, str], ServerAPI],
        *,
        producer_id: bytes | None = None,
    ) -> None:
        """``server(server_id, location)`` gives the handle of one table server."""
        self.master = master
        self._server_factory = server
        self._servers: dict[str, ServerAPI] = {}
        self.producer_id = producer_id or uuid.uuid4().bytes  # names this client's transactions
        self._producers = threading.local()
        self._routes: dict[str, _Routing] = {}
        self._metas: dict[str, TableMeta] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="memtier-client")
        # a read's call to the table servers, made while it reads the files (its own pool:
        # the call may use the one above for several servers)
        self._fetches = ThreadPoolExecutor(4, thread_name_prefix="memtier-client-read")
        self._files = SliceCache()  # decoded Hudi files, reused while they do not change
        self._points: dict[str, dict[str, Any]] = {}  # each table's last read point (see _read_once)
        self._fitting: dict[str, tuple[int, pa.Schema]] = {}  # per table, a batch schema that fits it

    # == catalog =========================================================================
    def create_table(
        self,
        name: str,
        schema: pa.Schema,
        *,
        record_key: str | Sequence[str] | None,
        ordering_field: str | None = None,
        partition_fields: str | Sequence[str] | None = None,
        buckets: int = 4,
        path: str | None = None,
        table_type: str = "MERGE_ON_READ",
        storage_options: Mapping[str, str] | None = None,
        log_block_format: str = "avro",
        table_version: int = DEFAULT_TABLE_VERSION,
        options: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Create a table (a Hudi table at ``path``, by default under the cluster root).

        ``table_version`` is the Hudi table version written: 6 (timeline layout 1, read by
        Hudi 0.14+ and 1.x, Trino, Presto, hudi-rs), 8 (Hudi 1.0+) or 9 (Hudi 1.1+); see
        the table of which reader reads which in docs/interoperability.md.

        ``record_key=None`` creates an append-only table: every row is kept (no merge or
        de-duplication by key), Hudi generates its record keys, and each producer's
        writes rotate over the ``buckets`` file groups of a partition. ``options``: the
        table's own (``{"schema.evolution": "off"}``; see :class:`~memtier.config.TableOptions`)."""
        return self.master.create_table(
            name, schema, record_key, ordering_field=ordering_field,
            partition_fields=partition_fields, buckets=buckets, table_type=table_type, path=path,
            storage_options=storage_options, log_block_format=log_block_format, options=options,
            table_version=table_version,
        )

    def alter_table(
        self,
        name: str,
        *,
        add_columns: pa.Schema | Sequence[pa.Field | tuple[str, pa.DataType]] | Mapping[str, pa.DataType] = (),
        widen: Mapping[str, pa.DataType] | None = None,
        options: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Change a table's schema while it is written and read: add nullable columns (at
        the end; a dotted name, ``"address.zip"``, adds inside a struct) and widen types
        (``{"amount": pa.float64()}``; see :mod:`memtier.hudi.evolution` for which), and
        set ``options``. All of it or nothing: a drop, rename, narrowing or non-null column
        is refused with :class:`~memtier.errors.SchemaEvolutionError` naming it and why.
        Every table server writes under the new schema once this returns; rows written
        before read as it has them (new columns null, widened values cast). The table's
        description."""
        with self._lock:
            self._fitting.pop(name, None)
        description = self.master.alter_table(name, _fields(add_columns), dict(widen or {}), options)
        with self._lock:
            self._routes[name] = _Routing.of(description)
        return description

    def register_table(self, name: str, path: str, storage_options: Mapping[str, str] | None = None,
                       buckets: int | None = None) -> dict[str, Any]:
        """Serve an existing Hudi table under ``name``. A table without a bucket index (Hudi's
        default index) needs ``buckets``: its file groups are converted into that many per
        partition by a clustering of the table-service pool; the description's
        ``conversion`` is that request (follow it with :meth:`service_request`) and writes
        raise :class:`~memtier.errors.TableConvertingError` until it completes."""
        return self.master.register_table(name, path, storage_options, buckets)

    def drop_table(self, name: str, *, purge: bool = False) -> None:
        self.master.drop_table(name, purge=purge)
        with self._lock:
            self._routes.pop(name, None)
            self._metas.pop(name, None)
            self._points.pop(name, None)

    # Calls that only look are retried while the master restarts, as reads and writes are.
    def list_tables(self) -> list[str]:
        return _retrying("list_tables", self.master.list_tables)

    def describe(self, name: str) -> dict[str, Any]:
        return _retrying(f"describe of {name}", lambda: self.master.describe_table(name))

    def status(self) -> dict[str, Any]:
        """Table servers, their memory and blocks, and each table's lag to the Hudi table."""
        return _retrying("status", self.master.status)

    # == routing =========================================================================
    def _route(self, name: str, *, refresh: bool = False) -> _Routing:
        with self._lock:
            route = self._routes.get(name)
        if route is None or refresh:
            route = _Routing.of(self.master.describe_table(name))
            with self._lock:
                self._routes[name] = route
        return route

    def _server(self, server_id: str, location: str) -> ServerAPI:
        with self._lock:
            handle = self._servers.get(location)
            if handle is None:
                handle = self._servers[location] = self._server_factory(server_id, location)
            return handle

    def _split(self, route: _Routing, table: pa.Table, producer_id: bytes, seq: int) -> dict[str, pa.Table]:
        """The batch's rows per table server (the whole batch when one server owns all).

        A batch going to several servers is checked whole first, as one server checks
        its batch: a rejected batch must leave no rows on any server. An append-only
        table's batch goes whole to the owner of the producer's next bucket.
        """
        if not route.buckets:
            raise UnsupportedTableError(
                f"table {route.name!r} has no bucket index; memtier writes bucket-indexed tables only:"
                " register it with buckets=N (memtier adopt PATH --buckets N) to convert it into buckets"
            )
        owners = set(route.routing.values())
        if len(owners) == 1:  # sent as it is: the server routes every row itself, reordering none
            return {owners.pop(): table}
        if not route.record_key:
            return {route.routing.get(producer_bucket(producer_id, seq, route.buckets), ""): table}
        if route.max_batch_rows is not None and table.num_rows > route.max_batch_rows:
            raise BatchTooLargeError(
                f"a batch of {table.num_rows} rows exceeds tableserver.max-batch-rows "
                f"({route.max_batch_rows}); split it"
            )
        table = prepare_write(
            table, route.schema, key_fields=route.record_key, partition_fields=route.partition_fields,
            ordering_field=route.ordering_field,
        )
        buckets = bucket_ids(table, route.record_key, route.buckets)
        order = file_group_order(table, route.record_key, route.partition_fields, route.buckets, buckets)
        order = np.arange(table.num_rows) if order is None else order
        servers = np.array([route.routing.get(b, "") for b in range(route.buckets)], dtype=object)
        per_row = servers[buckets[order]]  # each server's rows, in file-group order
        return {s: take_rows(table, order[per_row == s]) for s in sorted(set(per_row))}

    # == writes ==========================================================================
    def write(
        self, name: str, data: Any, *, txn_id: int = AUTOCOMMIT, sequence: int | None = None
    ) -> WriteResult:
        """Write a batch; returns once every row is durable in a WAL and in memory.

        Outside a transaction the rows are committed when acknowledged. A write retried
        here (a table server moved or restarted) reuses its producer sequence number, so
        rows a server already holds are dropped rather than applied twice; pass
        ``sequence`` (a previous write's ``WriteResult.sequence``, from the same thread:
        each thread writes as its own producer) to retry a write whose acknowledgement
        was lost, or number every write yourself (increasing). A write without one takes
        the number after the highest the thread used, given or not, so the two kinds mix
        without one being taken for a retry of another. A write that fails raises a
        :class:`~memtier.errors.MemtierError` whose ``sequence`` is the number it used:
        pass it to retry that write (its rows land once, whatever part of it was held).
        """
        producer = self._producer()
        seq = producer.number(sequence)
        try:
            return self._write(name, to_table(data), txn_id, producer.id, seq)
        except MemtierError as e:
            e.sequence = seq  # type: ignore[attr-defined]
            raise

    def _write(self, name: str, table: pa.Table, txn_id: int, producer_id: bytes, seq: int) -> WriteResult:
        """Send ``table`` (split by table server) as write ``seq`` of ``producer_id``, each
        piece again on a moved bucket or a lost server, for a while."""
        started = time.perf_counter()
        acks: list[WriteAck] = []
        pending = table
        deadline = time.monotonic() + RETRY_SECONDS
        self.evolve_for(name, table)
        for attempt in itertools.count():
            route = self._route(name, refresh=attempt > 0)
            if route.conversion is not None:  # it may have completed since the route was cached
                route = self._route(name, refresh=True)
            if route.conversion is not None:
                raise TableConvertingError(
                    f"table {name!r} is being converted into {route.buckets} buckets (clustering request"
                    f" {route.conversion['request_id']}, {route.conversion['state']}); writes resume when it completes"
                )
            pieces = self._split(route, pending, producer_id, seq)
            if "" in pieces:
                raise NotOwnerError(f"table {name!r} has buckets without a table server")
            failed: list[pa.Table] = []

            def send(item: tuple[str, pa.Table], route: _Routing = route) -> WriteAck:
                server_id, piece = item
                handle = self._server(server_id, route.location(server_id))
                return handle.write(name, piece, txn_id=txn_id, producer_id=producer_id, producer_seq=seq)

            items = list(pieces.items())
            results = [self._attempt(send, item) for item in items] if len(items) == 1 else list(
                self._pool.map(lambda item: self._attempt(send, item), items)
            )
            for (server_id, piece), result in zip(items, results, strict=True):
                if isinstance(result, WriteAck):
                    acks.append(result)
                else:
                    log.info("write to %s of %s failed (%s); retrying", server_id, name, result)
                    failed.append(piece)
            if not failed:
                return WriteResult(
                    sum(a.rows for a in acks), sum(a.duplicate_rows for a in acks),
                    sum(a.file_groups for a in acks), sum(a.evicted_bytes for a in acks),
                    time.perf_counter() - started, seq,
                )
            pending = pa.concat_tables(failed)
            if time.monotonic() > deadline:
                raise RpcError(
                    f"write to {name!r} failed for {RETRY_SECONDS:.0f}s: {', '.join(map(str, results))}"
                )
            time.sleep(min(0.02 * 2**attempt, 0.5))
        raise AssertionError("unreachable")

    def evolve_for(self, name: str, data: pa.Table) -> None:
        """Before ``data`` is written: if it has columns or wider types the table lacks,
        the master evolves the table first, once the batch is known to be writable under
        the evolved schema (or refuses it, naming them, when the table's
        ``schema.evolution`` is off); a bad batch changes nothing."""
        route = self._route(name)
        schema = data.schema
        with self._lock:
            known = self._fitting.get(name)
        if known is not None and known[0] == route.schema_version and known[1].equals(schema):
            return
        merged, found = merge(route.schema, schema, route.roles)
        if found:
            prepare_write(data, merged, key_fields=route.record_key, partition_fields=route.partition_fields,
                          ordering_field=route.ordering_field)
            route = _Routing.of(self.master.evolve_schema(name, schema))
        with self._lock:
            self._routes[name] = route
            self._fitting[name] = (route.schema_version, schema)

    def delete(self, name: str, keys: Any, *, txn_id: int = AUTOCOMMIT, sequence: int | None = None) -> WriteResult:
        """Delete keys: durable at the acknowledgement, hidden from the next read (latest;
        committed readers once committed) as :meth:`write` makes rows visible.

        ``keys``: for a one-column record key a list or Arrow array of keys; otherwise a
        table (or dict of columns, or DataFrame) of the record-key columns, plus the
        partition columns of a partitioned table, plus optionally the ordering column:
        a delete with an ordering value loses to an upsert of the same key with a
        greater one, as in Hudi; without one it deletes every version written before it.
        """
        route = self._route(name)
        if not route.record_key:
            raise InvalidArgumentError(f"table {name!r} is append-only: it has no record key to delete by")
        table = _key_table(keys, route.record_key)
        missing = [c for c in (*route.record_key, *route.partition_fields) if c not in table.column_names]
        if missing:
            raise InvalidArgumentError(
                f"deleting from {name!r} needs the record-key and partition columns; the keys lack {missing}"
            )
        flags = pa.array(np.ones(table.num_rows, dtype=bool))
        table = table.drop_columns([DELETE_FLAG]) if DELETE_FLAG in table.column_names else table
        return self.write(name, table.append_column(DELETE_FLAG, flags), txn_id=txn_id, sequence=sequence)

    def _producer(self) -> _Producer:
        """This thread's producer: its own id and sequence, so the servers see each
        producer's writes in order (a retry is dropped by "at or below the highest
        sequence seen"; two threads sharing one sequence would race past each other)."""
        local = self._producers
        if not hasattr(local, "producer"):
            local.producer = _Producer(uuid.uuid4().bytes)
        return local.producer

    @staticmethod
    def _attempt(send: Callable[[Any], WriteAck], item: Any) -> WriteAck | Exception:
        """One send; a lost server or a moved bucket is returned (to retry), not raised."""
        try:
            return send(item)
        except (NotOwnerError, RpcError) as e:
            return e

    @contextmanager
    def transaction(self, name: str, *, batch_id: str | None = None) -> Iterator[Transaction]:
        """``with client.transaction("t") as tx: tx.write(batch)``: commit on exit, abort
        on error. ``batch_id`` (e.g. a Spark micro-batch id) makes the transaction id
        stable across retries of the same batch."""
        tx = Transaction(self, name, batch_id or uuid.uuid4().hex)
        try:
            yield tx
        except BaseException:
            tx.abort()
            raise
        tx.commit()

    # == reads ===========================================================================
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
        return _retrying(f"read of {request.name}", lambda: self._read_once(checked))

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

        Either way the servers' rows are those they hold beyond the point's instant (a
        server keeps flushed blocks listed for a minute after their flush, and the
        timeline is listed after the read began), so no row is missed or read twice and
        a write acknowledged before the read began is in it."""
        previous = self._points.get(r.name) if r.mode in ("latest", "committed") and r.as_of is None else None
        if previous is not None:
            timeline = self._meta(r.name, previous).timeline()
            last = timeline.last_completed()
            newest = last.timestamp if last is not None else None
            if newest == previous["instant"]:
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
        master_plan = _retrying(f"read plan of {request.name}",
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
        route = _Routing.of(plan)
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
        route = _Routing.of(plan)
        filters = validate(r.filters, [*META_FIELDS, *meta.schema.names])
        needed = read_columns(meta, columns=r.columns, filters=filters, include_meta=r.include_meta)
        pushed = [f for f in key_filters(filters, route.record_key) if _json_value(f[2])]
        return self._read_servers(
            r.name, route, plan["instant"], TxnSnapshot.from_dict(plan["snapshot"]),
            r.mode == "committed", needed, buckets, pushed,
        )

    def _read_servers(
        self, name: str, route: _Routing, instant: str | None, snapshot: TxnSnapshot,
        committed_only: bool, needed: list[str], buckets: frozenset[int] | None,
        pushed: list[Filter],
    ) -> tuple[list[pa.Table], bool]:
        """Each owning server's unflushed rows of ``buckets`` (None: all), the ``pushed``
        record-key filters applied there so that only the keys asked for travel; and
        whether a server flagged rows of transactions ``snapshot`` left unresolved."""
        columns = [c for c in needed if c in route.schema.names]

        def one(item: tuple[str, list[int]]) -> pa.Table:
            server_id, owned = item
            wanted = owned if buckets is None else sorted(set(owned) & buckets)
            if not wanted:
                return pa.table({})
            handle = self._server(server_id, route.location(server_id))
            return handle.read(name, as_of_instant=instant, snapshot=snapshot,
                               committed_only=committed_only, columns=columns, buckets=wanted,
                               key_filters=pushed, schema_version=route.schema_version)

        items = list(route.server_buckets().items())
        tables = [one(items[0])] if len(items) == 1 else list(self._pool.map(one, items))
        unresolved = any(UNRESOLVED in (t.schema.metadata or {}) for t in tables)
        return [t for t in tables if t.num_rows], unresolved

    # == maintenance =====================================================================
    def flush(self, name: str) -> list[str]:
        """Flush everything acknowledged for the table into Hudi files (committed
        transactions only; open ones wait); the instants committed."""

        def flush_all() -> list[str]:
            route = self._route(name, refresh=True)
            instants = []
            for server_id in route.server_buckets():
                instants += self._server(server_id, route.location(server_id)).flush(name, seal=True)
            return instants

        return _retrying(f"flush of {name}", flush_all)

    # == table services ==================================================================
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

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._fetches.shutdown(wait=False)


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


def _key_table(keys: Any, record_key: Sequence[str]) -> pa.Table:
    """Keys as a table: a list or array names the values of a one-column record key."""
    if isinstance(keys, (list, tuple, pa.Array, pa.ChunkedArray)):
        if len(record_key) != 1:
            raise InvalidArgumentError(
                f"the record key has columns {list(record_key)}: give the keys as a table of them"
            )
        return pa.table({record_key[0]: keys})
    return to_table(pa.table(keys) if isinstance(keys, dict) else keys)


def _fields(
    columns: pa.Schema | Sequence[pa.Field | tuple[str, pa.DataType]] | Mapping[str, pa.DataType],
) -> list[pa.Field]:
    """Columns to add as fields: a schema, fields, (name, type) pairs or a name -> type
    mapping (nullable unless a field says otherwise)."""
    if isinstance(columns, Mapping):
        columns = list(columns.items())
    return [c if isinstance(c, pa.Field) else pa.field(c[0], c[1]) for c in columns]


@functools.lru_cache(maxsize=64)
def _schema(serialized: bytes) -> pa.Schema:
    """A table's schema from its description (parsed once: every read plan carries it)."""
    return pa.ipc.read_schema(pa.py_buffer(serialized))


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


def _retrying(what: str, call: Callable[[], T]) -> T:
    """``call()``, retried while table servers restart or buckets move (for a while)."""
    deadline = time.monotonic() + RETRY_SECONDS
    for attempt in itertools.count():
        try:
            return call()
        except (NotOwnerError, RpcError) as e:
            if time.monotonic() > deadline:
                raise
            log.info("%s failed (%s); retrying", what, e)
            time.sleep(min(0.02 * 2**attempt, 0.5))
    raise AssertionError("unreachable")


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


class _Producer:
    """One thread's producer id and the sequence numbers it wrote with (not thread-safe:
    one per thread)."""

    #: How many of its latest numbers a producer remembers, to tell a retry from a mistake.
    REMEMBERED = 4096

    def __init__(self, producer_id: bytes) -> None:
        self.id = producer_id
        self.last = 0  # the highest number written with
        self._used: collections.deque[int] = collections.deque(maxlen=self.REMEMBERED)
        self._known: set[int] = set()

    def number(self, given: int | None) -> int:
        """The sequence number of a write: ``given`` (a retry of a write made with it, or
        the caller's own numbering, which must increase), else the next after the highest
        written with. A given number at or below that which it never wrote with would be
        taken for a retry and dropped: refused."""
        if given is None:
            given = self.last + 1
        elif given <= self.last and given not in self._known and len(self._used) < self.REMEMBERED:
            raise InvalidArgumentError(
                f"sequence {given} is not above {self.last}, the highest this thread wrote with, and is no "
                "write's it made: it would be taken for a retry and its rows dropped (number writes in "
                "increasing order, or pass a WriteResult.sequence to retry that write)"
            )
        if given not in self._known:
            if len(self._used) == self._used.maxlen:
                self._known.discard(self._used[0])
            self._used.append(given)
            self._known.add(given)
        self.last = max(self.last, given)
        return given


class Transaction:
    """Writes that become visible to committed readers together, at commit."""

    def __init__(self, client: Client, table: str, batch_id: str) -> None:
        self.client = client
        self.table = table
        begun = client.master.begin_txn(table, client.producer_id.hex(), batch_id)
        self.txn_id: int = begun["txn_id"]
        self.state: str = begun["state"]

    def write(self, data: Any, *, sequence: int | None = None) -> WriteResult:
        """Write in this transaction (``sequence``: see :meth:`Client.write`)."""
        if self.state != "open":
            raise TransactionError(f"transaction {self.txn_id} is {self.state}; it takes no more writes")
        return self.client.write(self.table, data, txn_id=self.txn_id, sequence=sequence)

    def delete(self, keys: Any, *, sequence: int | None = None) -> WriteResult:
        """Delete keys in this transaction (see :meth:`Client.delete`)."""
        if self.state != "open":
            raise TransactionError(f"transaction {self.txn_id} is {self.state}; it takes no more writes")
        return self.client.delete(self.table, keys, txn_id=self.txn_id, sequence=sequence)

    def commit(self) -> None:
        if self.state == "aborted":
            raise TransactionError(f"transaction {self.txn_id} was aborted; it cannot commit")
        self.state = self.client.master.commit_txn(self.txn_id)

    def abort(self) -> None:
        if self.state == "open":
            self.state = self.client.master.abort_txn(self.txn_id)
