"""A table server over RPC: :class:`TableServerService` serves a :class:`TableServer`
(writes are Flight puts with the acknowledgement in the put result, block reads are
Flight gets); :class:`TableServerProxy` offers the same Python calls remotely."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

import pyarrow as pa

from memtier import failpoints
from memtier.errors import InvalidArgumentError
from memtier.exchange import AUTOCOMMIT, TxnSnapshot
from memtier.hudi.filters import Filter, pinned_values
from memtier.rpc.roles import ActionService, Proxy, no_result
from memtier.tableserver.server import TableServer, WriteAck

__all__ = ["TableServerProxy", "TableServerService"]


class TableServerService(ActionService):
    """Dispatches RPC calls to a :class:`TableServer`."""

    def __init__(self, server: TableServer) -> None:
        self.server = server
        s = server
        super().__init__("a table server", {
            "acquire": lambda r: no_result(s.acquire(r["table"], r["buckets"], life=r.get("life"))),
            "release": lambda r: no_result(s.release(r["table"], r.get("buckets"))),
            "flush": lambda r: {"instants": s.flush(r.get("table"), seal=r.get("seal", False))},
            "status": lambda r: s.status(),
            "evict": lambda r: {"freed": s.evict()},
            "fence_txn": lambda r: no_result(s.fence_txn(r["txn_id"])),
            "apply_schema": lambda r: no_result(s.apply_schema(r["table"], r["version"])),
            "ping": lambda r: {"server_id": s.server_id},
            "arm_failpoint": lambda r: no_result(self._arm(r["point"])),
        })

    def _arm(self, point: str) -> None:
        if not self.server.config.failpoints:
            raise InvalidArgumentError("failpoints are off on this table server (tableserver.failpoints)")
        failpoints.arm(point, "stop")

    def handle_put(self, request: dict[str, Any], data: pa.Table) -> dict[str, Any]:
        ack = self.server.write(
            request["table"], data, txn_id=request.get("txn_id", AUTOCOMMIT),
            producer_id=request["producer_id"], producer_seq=request["producer_seq"],
        )
        return ack.to_dict()

    def handle_get(self, request: dict[str, Any]) -> pa.Table:
        snapshot = request.get("snapshot")
        return self.server.read(
            request["table"], as_of_instant=request.get("as_of_instant"), pending=request.get("pending", ()),
            snapshot=TxnSnapshot.from_dict(snapshot) if snapshot is not None else None,
            committed_only=request.get("committed_only", False),
            columns=request.get("columns"), buckets=request.get("buckets"),
            key_filters=request.get("key_filters", ()), schema_version=request.get("schema_version"),
        )


class TableServerProxy(Proxy):
    """A :class:`TableServer` in another process: the same calls, over RPC."""

    def write(self, table: str, data: Any, *, txn_id: int = AUTOCOMMIT,
              producer_id: bytes = bytes(16), producer_seq: int = 0) -> WriteAck:
        request = {"table": table, "txn_id": txn_id, "producer_id": producer_id, "producer_seq": producer_seq}
        return WriteAck(**self._rpc.put(request, data))

    def read(self, table: str, *, as_of_instant: str | None, pending: Collection[str] = (),
             snapshot: TxnSnapshot | None = None, committed_only: bool = False,
             columns: list[str] | None = None, buckets: Iterable[int] | None = None,
             key_filters: Sequence[Filter] = (), schema_version: int | None = None) -> pa.Table:
        return self._rpc.get({
            "table": table, "as_of_instant": as_of_instant, "pending": sorted(pending),
            "snapshot": snapshot.to_dict() if snapshot is not None else None,
            "committed_only": committed_only,
            "columns": columns, "buckets": sorted(buckets) if buckets is not None else None,
            "key_filters": list(key_filters), "schema_version": schema_version,
        }, small=bool(pinned_values(key_filters)))  # a lookup answers with its keys' few rows

    def acquire(self, table: str, buckets: Sequence[int], *, life: str | None = None) -> None:
        self._rpc.call("acquire", {"table": table, "buckets": list(buckets), "life": life})

    def release(self, table: str, buckets: Sequence[int] | None = None) -> None:
        self._rpc.call("release", {"table": table, "buckets": list(buckets) if buckets is not None else None})

    def flush(self, table: str | None = None, *, seal: bool = False) -> list[str]:
        return self._rpc.call("flush", {"table": table, "seal": seal})["instants"]

    def status(self) -> dict[str, Any]:
        return self._rpc.call("status", {})

    def evict(self) -> int:
        return self._rpc.call("evict", {})["freed"]

    def fence_txn(self, txn_id: int) -> None:
        self._rpc.call("fence_txn", {"txn_id": txn_id})

    def apply_schema(self, table: str, version: int) -> None:
        self._rpc.call("apply_schema", {"table": table, "version": version})

    def ping(self) -> str:
        return self._rpc.call("ping", {})["server_id"]

    def arm_failpoint(self, point: str) -> None:
        """Stop the server's process at ``point`` next time (tests; ``tableserver.failpoints``)."""
        self._rpc.call("arm_failpoint", {"point": point})

