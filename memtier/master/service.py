"""The master over RPC: :class:`MasterService` serves a :class:`Master`;
:class:`MasterProxy` offers the same Python calls to any process that can reach it
(clients, table servers, Spark executors), none of which need Ray."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from memtier.errors import InvalidArgumentError
from memtier.exchange import FlushedBlock, TableLocation, TxnSnapshot
from memtier.hudi.properties import DEFAULT_TABLE_VERSION
from memtier.master.commits import FileGroupRef
from memtier.master.master import Master
from memtier.rpc.roles import ActionService, Proxy, no_result

__all__ = ["MasterProxy", "MasterService"]


def _schema_bytes(schema: pa.Schema) -> bytes:
    return schema.serialize().to_pybytes()


def _schema(data: bytes) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(data))


class MasterService(ActionService):
    """Dispatches RPC control calls to a :class:`Master`."""

    def __init__(self, master: Master) -> None:
        self.master = master
        m = master
        super().__init__("the master", {
            "create_table": lambda r: m.create_table(
                r["name"], _schema(r["schema"]), r["record_key"],
                ordering_field=r.get("ordering_field"), partition_fields=r.get("partition_fields"),
                buckets=r.get("buckets", 4), table_type=r.get("table_type", "MERGE_ON_READ"),
                path=r.get("path"), storage_options=r.get("storage_options"),
                log_block_format=r.get("log_block_format", "avro"), options=r.get("options"),
                table_version=r.get("table_version", DEFAULT_TABLE_VERSION),
            ),
            "alter_table": lambda r: m.alter_table(
                r["name"], list(_schema(r["add_columns"])), {f.name: f.type for f in _schema(r["widen"])},
                r.get("options"),
            ),
            "evolve_schema": lambda r: m.evolve_schema(r["name"], _schema(r["schema"])),
            "register_table": lambda r: m.register_table(r["name"], r["path"], r.get("storage_options"),
                                                         r.get("buckets")),
            "drop_table": lambda r: no_result(m.drop_table(r["name"], purge=r.get("purge", False))),
            "list_tables": lambda r: {"tables": m.list_tables()},
            "describe_table": lambda r: m.describe_table(r["name"]),
            "table_location": lambda r: vars(m.table_location(r["table"])),
            "register_server": lambda r: no_result(m.register_server(
                r["server_id"], r["location"], r["memory_budget"], r.get("max_batch_rows"), life=r["life"],
            )),
            "heartbeat": lambda r: m.heartbeat(
                r["server_id"], r["status"],
                {(t, int(b)): int(n) for t, b, n in r.get("bucket_memory", [])}, life=r["life"],
            ),
            "begin_txn": lambda r: m.begin_txn(r["table"], r["writer"], r["batch"]),
            "commit_txn": lambda r: {"state": m.commit_txn(r["txn_id"])},
            "abort_txn": lambda r: {"state": m.abort_txn(r["txn_id"])},
            "txn_snapshot": lambda r: m.txn_snapshot().to_dict(),
            "begin_commit": lambda r: {"instant": m.begin_commit(
                r["table"], r["action"], owner=r["owner"], file_groups=r["file_groups"], plan=r["plan"],
                life=r.get("life"), leased=bool(r.get("leased")),
            )},
            "renew_commit": lambda r: no_result(m.renew_commit(r["table"], r["instant"])),
            "commit_inflight": lambda r: no_result(m.commit_inflight(
                r["table"], r["instant"], r["planned"], r["file_groups"], life=r.get("life"),
            )),
            "complete_commit": lambda r: no_result(m.complete_commit(
                r["table"], r["instant"], r["content"], file_groups=r["file_groups"],
                check_conflicts=r["check_conflicts"], life=r.get("life"),
            )),
            "abort_commit": lambda r: no_result(m.abort_commit(r["table"], r["instant"], r.get("planned") or b"")),
            "complete_flush": lambda r: no_result(m.complete_flush(
                r["table"], r["instant"], r["stats"], [FlushedBlock.from_list(f) for f in r["flushed"]],
                life=r.get("life"),
            )),
            "flushed_blocks": lambda r: {"blocks": [f.to_list() for f in m.flushed_blocks(r["table"])]},
            "read_plan": lambda r: m.read_plan(r["table"], r.get("as_of")),
            "release_lease": lambda r: no_result(m.release_lease(r["lease"])),
            "schedule_service": lambda r: {"task": m.schedule_service(
                r["table"], r["kind"], partitions=r.get("partitions"), sort_columns=r.get("sort_columns") or (),
            )},
            "service_request": lambda r: m.service_request(r["request_id"]),
            "service_task": lambda r: m.service_task(r["task_id"]),
            "set_services": lambda r: {"services": m.set_services(r["table"], r["options"])},
            "sync_catalog": lambda r: m.sync_catalog(r["table"], r.get("metastore"), r.get("database")),
            "service_worker_started": lambda r: no_result(m.service_worker_started(r["worker"], r.get("cpus"))),
            "next_service_task": lambda r: {"task": m.next_service_task(r["worker"])},
            "service_progress": lambda r: {"ok": m.service_progress(
                r["task_id"], r["worker"], r["done"], r["total"]
            )},
            "finish_service_task": lambda r: m.finish_service_task(
                r["task_id"], r["worker"], r.get("content"), r.get("error"), r.get("file_groups") or (),
            ),
            "latest_commit": lambda r: {"instant": m.latest_commit(r["table"])},
            "status": lambda r: m.status(),
            "servers": lambda r: {"servers": m.servers()},
        })

    def handle_put(self, request: dict[str, Any], data: pa.Table) -> dict[str, Any]:
        raise InvalidArgumentError("the master takes no data: write to the table servers")

    def handle_get(self, request: dict[str, Any]) -> pa.Table:
        raise InvalidArgumentError("the master serves no data: read from the table servers")


class MasterProxy(Proxy):
    """A :class:`Master` in another process: the same calls, over RPC."""

    # catalog
    def create_table(
        self, name: str, schema: pa.Schema, record_key: str | Sequence[str] | None, *,
        ordering_field: str | None = None, partition_fields: str | Sequence[str] | None = None,
        buckets: int = 4, table_type: str = "MERGE_ON_READ", path: str | None = None,
        storage_options: Mapping[str, str] | None = None, log_block_format: str = "avro",
        table_version: int = DEFAULT_TABLE_VERSION,
        options: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        return self._call(
            "create_table", name=name, schema=_schema_bytes(schema), record_key=record_key,
            ordering_field=ordering_field, partition_fields=partition_fields, buckets=buckets,
            table_type=table_type, path=path, storage_options=storage_options,
            log_block_format=log_block_format, options=dict(options or {}),
            table_version=table_version,
        )

    def alter_table(self, name: str, add_columns: Sequence[pa.Field] = (),
                    widen: Mapping[str, pa.DataType] | None = None,
                    options: Mapping[str, str] | None = None) -> dict[str, Any]:
        widened = pa.schema([pa.field(n, t) for n, t in (widen or {}).items()])
        return self._call("alter_table", name=name, add_columns=_schema_bytes(pa.schema(list(add_columns))),
                          widen=_schema_bytes(widened), options=dict(options or {}))

    def evolve_schema(self, name: str, incoming: pa.Schema) -> dict[str, Any]:
        return self._call("evolve_schema", name=name, schema=_schema_bytes(incoming))

    def register_table(self, name: str, path: str, storage_options: Mapping[str, str] | None = None,
                       buckets: int | None = None) -> dict[str, Any]:
        return self._call("register_table", name=name, path=path, storage_options=storage_options, buckets=buckets)

    def drop_table(self, name: str, *, purge: bool = False) -> None:
        self._call("drop_table", name=name, purge=purge)

    def list_tables(self) -> list[str]:
        return self._call("list_tables")["tables"]

    def describe_table(self, name: str) -> dict[str, Any]:
        return self._call("describe_table", name=name)

    def table_location(self, table: str) -> TableLocation:
        return TableLocation(**self._call("table_location", table=table))

    # table servers
    def register_server(
        self, server_id: str, location: str, memory_budget: int, max_batch_rows: int | None = None, *,
        life: str,
    ) -> None:
        self._call("register_server", server_id=server_id, location=location,
                   memory_budget=memory_budget, max_batch_rows=max_batch_rows, life=life)

    def heartbeat(self, server_id: str, status: Mapping[str, Any],
                  bucket_memory: Mapping[tuple[str, int], int] | None = None, *, life: str) -> dict[str, Any]:
        held = [[t, b, n] for (t, b), n in (bucket_memory or {}).items()]
        return self._call("heartbeat", server_id=server_id, status=dict(status), bucket_memory=held, life=life)

    # transactions
    def begin_txn(self, table: str, writer: str, batch: str) -> dict[str, Any]:
        return self._call("begin_txn", table=table, writer=writer, batch=batch)

    def commit_txn(self, txn_id: int) -> str:
        return self._call("commit_txn", txn_id=txn_id)["state"]

    def abort_txn(self, txn_id: int) -> str:
        return self._call("abort_txn", txn_id=txn_id)["state"]

    def txn_snapshot(self) -> TxnSnapshot:
        return TxnSnapshot.from_dict(self._call("txn_snapshot"))

    # the commit path
    def begin_commit(self, table: str, action: str, *, owner: str,
                     file_groups: Sequence[FileGroupRef] = (), plan: bytes = b"", life: str | None = None,
                     leased: bool = False) -> str:
        return self._call("begin_commit", table=table, action=action, owner=owner,
                          file_groups=[list(g) for g in file_groups], plan=plan, life=life, leased=leased)["instant"]

    def renew_commit(self, table: str, instant: str) -> None:
        self._call("renew_commit", table=table, instant=instant)

    def commit_inflight(self, table: str, instant: str, planned: bytes = b"",
                        file_groups: Sequence[FileGroupRef] = (), *, life: str | None = None) -> None:
        self._call("commit_inflight", table=table, instant=instant, planned=planned,
                   file_groups=[list(g) for g in file_groups], life=life)

    def complete_commit(self, table: str, instant: str, content: bytes, *,
                        file_groups: Sequence[FileGroupRef] = (), check_conflicts: bool = False,
                        life: str | None = None) -> None:
        self._call("complete_commit", table=table, instant=instant, content=content,
                   file_groups=[list(g) for g in file_groups], check_conflicts=check_conflicts, life=life)

    def abort_commit(self, table: str, instant: str, planned: bytes = b"") -> None:
        self._call("abort_commit", table=table, instant=instant, planned=planned)

    def complete_flush(self, table: str, instant: str, stats: Sequence[Mapping[str, Any]],
                       flushed: Sequence[FlushedBlock], *, life: str | None = None) -> None:
        self._call("complete_flush", table=table, instant=instant, stats=[dict(s) for s in stats],
                   flushed=[f.to_list() for f in flushed], life=life)

    def flushed_blocks(self, table: str) -> list[FlushedBlock]:
        return [FlushedBlock.from_list(f) for f in self._call("flushed_blocks", table=table)["blocks"]]

    def latest_commit(self, table: str) -> str | None:
        return self._call("latest_commit", table=table)["instant"]

    # reads and status
    def read_plan(self, table: str, as_of: str | None = None) -> dict[str, Any]:
        return self._call("read_plan", table=table, as_of=as_of)

    def release_lease(self, lease: int) -> None:
        self._call("release_lease", lease=lease)

    # table services
    def schedule_service(self, table: str, kind: str, *, partitions: Sequence[str] | None = None,
                         sort_columns: Sequence[str] = ()) -> dict[str, Any] | None:
        return self._call("schedule_service", table=table, kind=kind,
                          partitions=list(partitions) if partitions is not None else None,
                          sort_columns=list(sort_columns))["task"]

    def service_request(self, request_id: int) -> dict[str, Any]:
        return self._call("service_request", request_id=request_id)

    def service_task(self, task_id: int) -> dict[str, Any]:
        return self._call("service_task", task_id=task_id)

    def set_services(self, table: str, options: Mapping[str, str]) -> dict[str, str]:
        return self._call("set_services", table=table, options=dict(options))["services"]

    def sync_catalog(self, table: str, metastore: str | None = None,
                     database: str | None = None) -> dict[str, Any]:
        return self._call("sync_catalog", table=table, metastore=metastore, database=database)

    def service_worker_started(self, worker: str, cpus: str | None = None) -> None:
        self._call("service_worker_started", worker=worker, cpus=cpus)

    def next_service_task(self, worker: str) -> dict[str, Any] | None:
        return self._call("next_service_task", worker=worker)["task"]

    def service_progress(self, task_id: int, worker: str, done: int, total: int) -> bool:
        return self._call("service_progress", task_id=task_id, worker=worker, done=done, total=total)["ok"]

    def finish_service_task(self, task_id: int, worker: str, content: bytes | None, error: str | None = None,
                            file_groups: Sequence[FileGroupRef] = ()) -> dict[str, Any]:
        return self._call("finish_service_task", task_id=task_id, worker=worker, content=content,
                          error=error, file_groups=[list(g) for g in file_groups])

    def status(self) -> dict[str, Any]:
        return self._call("status")

    def servers(self) -> dict[str, str]:
        return self._call("servers")["servers"]

