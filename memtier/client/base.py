"""The state a client keeps (the master, table-server handles, routes, caches) and its
catalog calls: create, alter, register, drop, list and describe tables."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from memtier.client.api import MasterAPI, ServerAPI, retrying
from memtier.client.routing import Routing
from memtier.hudi.cache import SliceCache
from memtier.hudi.properties import DEFAULT_TABLE_VERSION
from memtier.hudi.tablemeta import TableMeta


class ClientBase:
    """A connection to one memtier cluster: its state, catalog calls and routes; thread-safe."""

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
        self._routes: dict[str, Routing] = {}
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
            self._routes[name] = Routing.of(description)
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
        return retrying("list_tables", self.master.list_tables)

    def describe(self, name: str) -> dict[str, Any]:
        return retrying(f"describe of {name}", lambda: self.master.describe_table(name))

    def status(self) -> dict[str, Any]:
        """Table servers, their memory and blocks, and each table's lag to the Hudi table."""
        return retrying("status", self.master.status)

    # == routing =========================================================================
    def _route(self, name: str, *, refresh: bool = False) -> Routing:
        with self._lock:
            route = self._routes.get(name)
        if route is None or refresh:  # (a write refreshes it on a moved bucket: the master may be restarting)
            route = Routing.of(self.describe(name))
            with self._lock:
                self._routes[name] = route
        return route

    def _server(self, server_id: str, location: str) -> ServerAPI:
        with self._lock:
            handle = self._servers.get(location)
            if handle is None:
                handle = self._servers[location] = self._server_factory(server_id, location)
            return handle

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._fetches.shutdown(wait=False)


def _fields(
    columns: pa.Schema | Sequence[pa.Field | tuple[str, pa.DataType]] | Mapping[str, pa.DataType],
) -> list[pa.Field]:
    """Columns to add as fields: a schema, fields, (name, type) pairs or a name -> type
    mapping (nullable unless a field says otherwise)."""
    if isinstance(columns, Mapping):
        columns = list(columns.items())
    return [c if isinstance(c, pa.Field) else pa.field(c[0], c[1]) for c in columns]
