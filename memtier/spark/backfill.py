"""Batch backfills: ``df.write.format("memtier").mode("append")``. Rows bypass the table
servers and memory: each Spark task routes its rows with the table's bucket index and
writes one log file per file group it touches, under a temporary name
(:class:`~memtier.hudi.filenames.PendingLogFile`), and one deltacommit through the
master's commit path makes them visible: the master names them then, into the slice each
file group has (a new group starts log-only, as Hudi's bucket-index writers do) after
every log file completed before (:mod:`memtier.hudi.logorder`). So a backfill and the
write tier's flushes into the same file groups both commit, merged by ordering value with
ties going to the later completion; only a clustering that rewrote one of its file groups
since it began makes it fail (rolled back: no file of it stays visible)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from memtier.client.lease import InstantLease
from memtier.errors import InvalidArgumentError
from memtier.hudi.commit import WriteStat
from memtier.hudi.evolution import merge
from memtier.hudi.filegroup import plan_pending_log_write, write_file_group
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.routing import route
from memtier.hudi.tablemeta import TableMeta
from memtier.hudi.timeline import REPLACING_ACTIONS
from memtier.hudi.writer import (
    OPERATIONS,
    commit_metadata,
    ensure_partition_metadata,
    existing_buckets,
    prepare_write,
)
from memtier.io import open_fileio
from memtier.spark.connection import client_for
from memtier.spark.options import SourceOptions
from memtier.spark.types import check_columns

__all__ = ["Backfill", "BackfillFiles"]

#: The driver's leases on the instants of backfills under way (kept out of the writer,
#: which Spark sends to its executors), by instant.
_leases: dict[str, InstantLease] = {}


@dataclass
class BackfillFiles(WriterCommitMessage):
    """The files one task wrote, as write stats."""

    stats: list[dict[str, Any]]


class Backfill(DataSourceArrowWriter):
    """Begun (a requested deltacommit) where Spark plans the write; tasks write files;
    ``commit`` completes it, ``abort`` rolls it back."""

    def __init__(self, options: SourceOptions, schema: pa.Schema) -> None:
        self.options = options
        self.operation = (options.get("operation") or "upsert").lower()
        if self.operation == "insert_overwrite":
            raise InvalidArgumentError("operation insert_overwrite is not supported yet; use upsert, insert or delete")
        if self.operation not in OPERATIONS:
            raise InvalidArgumentError(f"operation must be one of {sorted(OPERATIONS)}, got {self.operation!r}")
        client = client_for(options)
        description = client.describe(options.table)
        self.path: str = description["path"]
        self.storage_options = description.get("storage_options") or None
        meta = self._meta()  # the table and columns checked before anything is begun:
        if not meta.is_merge_on_read:
            raise InvalidArgumentError(f"table {options.table} is copy-on-write: a backfill writes log files, "
                                       "which only a merge-on-read table has")
        evolving = self.operation != "delete"  # new columns and wider types evolve the table first
        checked = check_columns(merge(meta.schema, schema, meta.roles)[0] if evolving else meta.schema,
                                schema.names, delete_flag=False)
        if evolving:
            client.evolve_for(options.table, schema.empty_table())
            meta = self._meta()
        prepare_write(meta, meta.schema.empty_table().select(checked), self.operation)
        self.owner = f"spark-backfill-{uuid.uuid4().hex[:12]}"
        self.instant: str = client.master.begin_commit(options.table, "deltacommit", owner=self.owner, leased=True)
        _leases[self.instant] = InstantLease(client.master, options.table, self.instant)

    def _meta(self) -> TableMeta:
        return TableMeta.load(open_fileio(self.path, self.storage_options), self.path)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BackfillFiles:
        batches = list(iterator)
        if not batches or not sum(b.num_rows for b in batches):
            return BackfillFiles([])
        meta = self._meta()
        rows = prepare_write(meta, pa.Table.from_batches(batches), self.operation)
        timeline = meta.timeline()
        view = FileSystemView.build(meta.io, meta.base_path, timeline)
        changes = route(meta, rows, deletes=self.operation == "delete", existing=existing_buckets(view))
        task, token = _write_token()
        plans = [p for p in (plan_pending_log_write(c, task, token) for c in changes) if p is not None]
        ensure_partition_metadata(meta, {p.change.partition_path for p in plans}, self.instant)
        return BackfillFiles([write_file_group(meta, p, self.instant, timeline).to_dict() for p in plans])

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _end_lease(self.instant)
        content, groups = self._metadata(messages)
        master = client_for(self.options).master
        master.commit_inflight(self.options.table, self.instant, content, file_groups=groups)
        master.complete_commit(self.options.table, self.instant, content, file_groups=groups,
                               check_conflicts=list(REPLACING_ACTIONS))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Roll the instant back, naming the files finished tasks wrote so that the
        rollback deletes them; nothing to do when its commit rolled it back already."""
        _end_lease(self.instant)
        content, _ = self._metadata(messages)
        client_for(self.options).master.abort_commit(self.options.table, self.instant, content)

    def _metadata(self, messages: list[WriterCommitMessage | None]) -> tuple[bytes, list[tuple[str, str]]]:
        """The commit metadata naming every file the tasks wrote, and the file groups they touched."""
        stats = [WriteStat.from_dict(s) for m in messages if isinstance(m, BackfillFiles) for s in m.stats]
        groups = sorted({(s.partition_path, s.file_id) for s in stats})
        return commit_metadata(self._meta(), stats, OPERATIONS[self.operation]).to_json(), groups


def _end_lease(instant: str) -> None:
    """Stop renewing the lease on ``instant`` (in the driver; the commit or abort that
    follows ends the instant either way)."""
    lease = _leases.pop(instant, None)
    if lease is not None:
        lease.stop()


def _write_token() -> tuple[int, str]:
    """This task's number and Hudi write token (partition-stage-attempt), unique per
    attempt. Stages count from 1 here: a flush's tokens are ``<task>-0-0``, and a log
    file name must never be one a flush may pick (a flush's rollback deletes the files
    it named)."""
    context = TaskContext.get()
    if context is None:  # run outside Spark (tests drive the steps directly)
        return 0, "0-1-0"
    return context.partitionId(), f"{context.partitionId()}-{context.stageId() + 1}-{context.taskAttemptId()}"
