"""Streaming ingest: ``df.writeStream.format("memtier")``. Each micro-batch is one
memtier transaction, named by the query id (stable across restarts from a checkpoint)
and the batch id: tasks write their rows into it (durable in WALs at each ack), and the
sink's ``commit`` commits it, so the batch becomes visible to committed readers at once.

A batch Spark replays (it ran, but Spark did not record its commit) finds its
transaction: committed, the replay writes nothing; still open (the query died), the
replay writes into it again, and rows of a keyed table merge by key, so nothing is
doubled; aborted (Spark gave the batch up), the replay starts the next attempt's
transaction. At-least-once from Spark, exactly-once in a keyed table (an append-only
table has no key to merge on: a batch replayed after a killed query can repeat rows).
Rows whose boolean ``_hoodie_is_deleted`` is true delete their key (Hudi's convention).
The master's transaction calls are retried while it restarts (they are idempotent), as
the writes are."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from memtier.client import Client
from memtier.client.api import retrying
from memtier.errors import InvalidArgumentError, TransactionError
from memtier.spark.connection import client_for
from memtier.spark.options import SourceOptions

__all__ = ["BatchMessage", "StreamSink", "batch_transaction"]

#: Spark's local properties naming the streaming query and its micro-batch.
QUERY_ID = "sql.streaming.queryId"
BATCH_ID = "streaming.sql.batchId"
_MAX_ATTEMPTS = 1000


@dataclass
class BatchMessage(WriterCommitMessage):
    """What one task of a micro-batch did."""

    writer: str
    batch: str  # the transaction's batch name (batch id and attempt)
    rows: int
    skipped: bool  # the batch had committed before: nothing written


def batch_transaction(client: Client, table: str, writer: str, batch_id: int) -> tuple[int, str, str]:
    """The transaction of a micro-batch: (id, state, batch name). The first attempt's
    unless that one was aborted, then the next one's."""
    for attempt in range(_MAX_ATTEMPTS):
        name = f"{batch_id}" if attempt == 0 else f"{batch_id}.{attempt}"
        begun = retrying(f"begin of micro-batch {name} of {writer}",
                         lambda name=name: client.master.begin_txn(table, writer, name))
        if begun["state"] != "aborted":
            return begun["txn_id"], begun["state"], name
    raise TransactionError(f"micro-batch {batch_id} of {writer} was aborted {_MAX_ATTEMPTS} times")


class StreamSink(DataSourceStreamArrowWriter):
    """Executors write micro-batches into their transaction; ``commit`` commits it."""

    def __init__(self, options: SourceOptions, columns: Sequence[str]) -> None:
        self.options = options
        self.columns = list(columns)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BatchMessage:
        context = TaskContext.get()
        assert context is not None, "write runs in a Spark task"
        query, batch_id = context.getLocalProperty(QUERY_ID), context.getLocalProperty(BATCH_ID)
        if query is None or batch_id is None:
            raise InvalidArgumentError("the memtier stream sink runs only in a streaming query")
        client = client_for(self.options)
        writer = f"spark-{query}"
        txn_id, state, name = batch_transaction(client, self.options.table, writer, int(batch_id))
        if state == "committed":
            for _ in iterator:  # drain: Spark expects the input consumed
                pass
            return BatchMessage(writer, name, 0, True)
        rows = 0
        for batch in iterator:
            if batch.num_rows:
                client.write(self.options.table, pa.Table.from_batches([batch]), txn_id=txn_id)
                rows += batch.num_rows
        return BatchMessage(writer, name, rows, False)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        self._resolve(messages, batchId, commit=True)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        self._resolve(messages, batchId, commit=False)

    def _resolve(self, messages: list[WriterCommitMessage | None], batch_id: int, *, commit: bool) -> None:
        """Commit or abort the micro-batch's transaction, if its tasks began one and it is
        still open (no message: an empty batch, or no task got as far; a replay finds it)."""
        sent = [m for m in messages if isinstance(m, BatchMessage)]
        if not sent:
            return
        client = client_for(self.options)
        txn_id, state, _ = batch_transaction(client, self.options.table, sent[0].writer, batch_id)
        if state == "open":
            resolve = client.master.commit_txn if commit else client.master.abort_txn
            retrying(f"{'commit' if commit else 'abort'} of micro-batch {batch_id}", lambda: resolve(txn_id))
