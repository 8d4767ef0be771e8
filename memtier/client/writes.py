"""The write path: batches split by table server, acknowledged once durable in their WALs,
retried by producer sequence; deletes; schema evolution by write; transactions."""

from __future__ import annotations

import collections
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa

from memtier.client.api import RETRY_SECONDS, WriteResult, retrying
from memtier.client.base import ClientBase
from memtier.client.routing import Routing
from memtier.errors import (
    BatchTooLargeError,
    InvalidArgumentError,
    MemtierError,
    NotOwnerError,
    RpcError,
    TableConvertingError,
    TransactionError,
    UnsupportedTableError,
)
from memtier.exchange import AUTOCOMMIT
from memtier.hudi.deletes import DELETE_FLAG, prepare_write
from memtier.hudi.evolution import merge
from memtier.hudi.keys import bucket_ids
from memtier.hudi.routing import file_group_order, producer_bucket
from memtier.hudi.rows import take_rows
from memtier.hudi.schema import to_table
from memtier.tableserver.tables import WriteAck

log = logging.getLogger(__name__)


class Writes(ClientBase):
    """Writes, deletes and transactions of a :class:`~memtier.client.Client`."""

    def _split(self, route: Routing, table: pa.Table, producer_id: bytes, seq: int) -> dict[str, pa.Table]:
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

            def send(item: tuple[str, pa.Table], route: Routing = route) -> WriteAck:
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
            route = Routing.of(self.master.evolve_schema(name, schema))
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


def _key_table(keys: Any, record_key: Sequence[str]) -> pa.Table:
    """Keys as a table: a list or array names the values of a one-column record key."""
    if isinstance(keys, (list, tuple, pa.Array, pa.ChunkedArray)):
        if len(record_key) != 1:
            raise InvalidArgumentError(
                f"the record key has columns {list(record_key)}: give the keys as a table of them"
            )
        return pa.table({record_key[0]: keys})
    return to_table(pa.table(keys) if isinstance(keys, dict) else keys)


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

    def __init__(self, client: Writes, table: str, batch_id: str) -> None:
        self.client = client
        self.table = table
        begun = retrying(f"begin of transaction {batch_id!r} on {table}",
                         lambda: client.master.begin_txn(table, client.producer_id.hex(), batch_id))
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
        self.state = retrying(f"commit of transaction {self.txn_id}",
                              lambda: self.client.master.commit_txn(self.txn_id))

    def abort(self) -> None:
        if self.state == "open":
            self.state = retrying(f"abort of transaction {self.txn_id}",
                                  lambda: self.client.master.abort_txn(self.txn_id))
