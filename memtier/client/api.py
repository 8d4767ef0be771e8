"""What a client talks to: the master's and a table server's calls (which the core objects
in-process and their RPC proxies both offer), a write's acknowledgement, and the retry of
calls while the master restarts."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import pyarrow as pa

from memtier.errors import NotOwnerError, RpcError
from memtier.exchange import TxnSnapshot
from memtier.hudi.filters import Filter
from memtier.tableserver.tables import WriteAck

log = logging.getLogger(__name__)


T = TypeVar("T")

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
    def read(self, table: str, *, as_of_instant: str | None, pending: Collection[str] = (),
             snapshot: TxnSnapshot | None = None, committed_only: bool = False, columns: list[str] | None = None,
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


def retrying(what: str, call: Callable[[], T]) -> T:
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
