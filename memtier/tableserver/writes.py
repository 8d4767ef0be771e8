"""The write path of a table server: a batch validated, routed to its file groups under the
table's schema, appended to the table's WAL stream (durable on return), then to memory and
acknowledged; transactions being resolved refused."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa

from memtier import failpoints
from memtier.errors import (
    BatchTooLargeError,
    FencedError,
    NotOwnerError,
    SchemaEvolutionError,
    TransactionError,
    WalClosedError,
)
from memtier.exchange import AUTOCOMMIT
from memtier.hudi.deletes import prepare_write
from memtier.hudi.evolution import merge
from memtier.hudi.filenames import bucket_file_id
from memtier.hudi.keys import check_keys
from memtier.hudi.routing import file_groups, producer_bucket, spread
from memtier.hudi.schema import conform, to_table
from memtier.hudi.tablemeta import TableMeta
from memtier.tableserver.base import ServerBase
from memtier.tableserver.block import Block, Frame, Share
from memtier.tableserver.filegroup import FileGroup, FileGroupKey
from memtier.tableserver.tables import SchemaMoved, ServedTable, WriteAck, all_held
from memtier.wal import PendingAppend, StreamFrame
from memtier.wal.format import Selection, frame_payload

_NO_PRODUCER = bytes(16)


class _HeldWriteFailed(Exception):
    """A write taken for a retry of one still waiting for its sync, which then failed:
    the write is appended again (``rows``: what this attempt appended meanwhile)."""

    def __init__(self, rows: int) -> None:
        super().__init__(rows)
        self.rows = rows


class Writes(ServerBase):
    """Writes into the blocks of a :class:`~memtier.tableserver.server.TableServer`."""

    def write(
        self,
        table: str,
        data: Any,
        *,
        txn_id: int = AUTOCOMMIT,
        producer_id: bytes = _NO_PRODUCER,
        producer_seq: int = 0,
    ) -> WriteAck:
        """Validate, append durably to the WAL, then to memory; the acknowledgement.

        A batch is checked whole before anything is appended: a rejected batch leaves no
        rows in any WAL or in memory. A retry (same producer and sequence) is dropped for
        every file group that already holds it, acknowledged only once what holds it is
        durable: a retry sent while the first attempt still waits for its sync (the client
        timed out) waits for that sync, and is appended itself if the sync failed.
        """
        started = time.perf_counter()
        t = self._table(table)
        batch = to_table(data)
        if batch.num_rows > self.config.max_batch_rows:
            raise BatchTooLargeError(
                f"a batch of {batch.num_rows} rows exceeds tableserver.max-batch-rows "
                f"({self.config.max_batch_rows}); split it"
            )
        if batch.num_rows == 0:
            return WriteAck(0, 0, 0, 0)
        self._check_txn(txn_id)
        appended = 0  # by attempts that found a write they were taken for failed
        while True:
            meta = self._schema_for(t, batch)
            stored = t.stored_for(meta)
            logical = prepare_write(
                batch, meta.schema, key_fields=meta.config.record_key_fields,
                partition_fields=meta.config.partition_fields, ordering_field=meta.config.ordering_field,
            )
            physical = conform(logical, stored)
            groups = _file_group_rows(
                meta, physical, producer_bucket(producer_id, producer_seq, meta.config.buckets or 1))
            buckets = {b for _, b, _ in groups}
            self._check_owned(t, buckets)
            whole = physical.combine_chunks().to_batches()[0]  # the rows as they came: never reordered
            pieces = [
                (FileGroupKey(partition, t.file_ids.get((partition, bucket)) or bucket_file_id(bucket)),
                 Selection(whole.num_rows) if rows is None else Selection.of(rows.astype(np.int32, copy=False)))
                for partition, bucket, rows in groups
            ]
            # (``nbytes`` takes ~12 us to find the batch's size)
            nbytes = whole.get_total_buffer_size() + sum(
                p.positions.nbytes for _, p in pieces if p.positions is not None)
            evicted = self._admit(nbytes)
            failpoints.hit(failpoints.BEFORE_APPEND)
            try:
                rows = appended + self._append(t, meta, whole, buckets, pieces, Share(nbytes, len(pieces)),
                                               txn_id, producer_id, producer_seq)
                break
            except SchemaMoved:  # changed while the batch was prepared: prepared again, under the new one
                continue
            except _HeldWriteFailed as e:  # appended now where the write it was taken for failed
                appended += e.rows
                continue
            except FencedError:
                self.reset(t.stream.life)
                raise
            except WalClosedError as e:
                if t.gone:  # given up (or lost) while this write waited: the new owner takes it
                    raise NotOwnerError(f"table {table!r} is no longer served by table server "
                                        f"{self.server_id}; refresh the routing and retry") from e
                raise
        failpoints.hit(failpoints.BEFORE_ACK)
        self.write_latency.add(time.perf_counter() - started)
        t.acknowledged.add(rows, nbytes)
        return WriteAck(rows, batch.num_rows - rows, len(pieces), evicted)

    def _schema_for(self, t: ServedTable, batch: pa.Table) -> TableMeta:
        """The table as ``batch`` is written under: as this server writes it now, or, when
        the batch has columns or wider types that lacks, as its timeline says (a schema
        change this server has not applied yet is applied first). A batch that still does
        not fit is refused (:class:`SchemaEvolutionError`): clients evolve the table first
        where its ``schema.evolution`` lets them (:meth:`Master.evolve_schema`)."""
        meta = t.meta
        if t.fits(meta, batch.schema):
            return meta
        meta = self._refresh_schema(t)
        _, found = merge(meta.schema, batch.schema, meta.roles)
        if found:
            raise SchemaEvolutionError(
                f"the batch does not fit the schema of table {t.name!r} ({'; '.join(map(str, found))}): the "
                "table's schema must change first (alter_table; clients do it themselves unless the table's "
                "schema.evolution is off)"
            )
        return meta

    def apply_schema(self, table: str, version: int) -> None:
        """Write ``table`` under its schema ``version`` (or a newer one) from now on, if
        it is served here: the master changed it."""
        with self._lock:
            t = self._tables.get(table)
        if t is not None and t.meta.schema_version < version:
            self._refresh_schema(t)

    def _append(
        self,
        t: ServedTable,
        meta: TableMeta,
        whole: pa.RecordBatch,
        buckets: set[int],
        pieces: list[tuple[FileGroupKey, Selection]],
        share: Share,
        txn_id: int,
        producer_id: bytes,
        producer_seq: int,
    ) -> int:
        """Append each piece (the rows of ``whole``, the write admitted as ``share``, that
        one file group takes) to its file group's open block; the rows appended. Under the
        file groups' locks (taken in key order), once the server is seen to still serve
        ``buckets`` (a release or reset takes them away holding those locks, so no append
        outlives it), the pieces are queued on the table's WAL
        stream as one append (the batch written once, each block's frame a selection of
        it, when it goes to several), and added to memory; the wait until they are durable
        (one sync, shared with concurrent writes) comes after the locks are released.
        Reads see the frames once durable. ``whole`` was prepared under ``meta``: if the
        table's schema changed since, nothing is appended (:class:`SchemaMoved`). Pieces
        a file group holds already are skipped, once what holds them is durable
        (:class:`_HeldWriteFailed` if it failed)."""
        with self._lock:
            groups = [t.groups.get(key) for key, _ in pieces]
            for i, (key, _) in enumerate(pieces):
                if groups[i] is None:
                    groups[i] = t.groups[key] = self._new_group(t, key)
        payload = frame_payload(t.stored_for(meta), whole)
        shared = len(pieces) > 1  # else one frame record of the whole batch
        pending: PendingAppend | None = None
        made: list[tuple[FileGroup, Block, Frame, int]] = []
        rows = added = 0
        full = False
        estimate = share.nbytes // len(pieces)  # a block's size grows by its share
        locked = sorted({id(g): g for g in groups}.values(), key=lambda g: g.key)
        try:
            with all_held([g.lock for g in locked]):
                self._check_owned(t, buckets)
                if t.meta is not meta:
                    raise SchemaMoved
                fresh, held = [], []
                for group, (_, selection) in zip(groups, pieces, strict=True):
                    if not group.is_duplicate(producer_id, producer_seq):
                        fresh.append((group, selection))
                    elif (in_flight := group.in_flight(producer_id)) is not None:
                        held.append(in_flight)
                if fresh:
                    blocks = [group.open_block(t.generation) for group, _ in fresh]
                    queued = t.stream.queue(
                        [StreamFrame(b.header, selection if shared else payload, selection.count)
                         for b, (_, selection) in zip(blocks, fresh, strict=True)],
                        txn_id=txn_id, producer_id=producer_id, producer_seq=producer_seq,
                        rows=payload if shared else None,
                    )
                    pending = queued.pending
                    for block, (group, selection), ref in zip(blocks, fresh, queued.refs, strict=True):
                        # memory keeps the batch, not the payload (its record in the stream is
                        # read back only when the block is evicted)
                        source, positions = (
                            (whole, selection.positions) if selection.positions is not None
                            else (whole.slice(selection.start, selection.count), None)
                        )
                        frame = Frame(txn_id, producer_id, producer_seq, source, positions,
                                      ack=pending, share=share, ref=ref)
                        made.append((group, block, frame, group.add(block, frame, estimate)))
                        rows += selection.count
                        added += 1
                    with t.generation_lock:
                        t.open_bytes += estimate * added
                        full = t.open_bytes >= self._block_max_bytes
        finally:
            # the slices not appended (duplicates, or an error) are dropped at once
            self.memory.release(sum(share.drop() for _ in range(len(pieces) - added)))
            if pending is not None:
                try:
                    pending.wait()
                except BaseException:  # not durable: a retry of it must not be taken for held
                    for group, _, frame, before in made:
                        group.unsee(frame, before)
                    raise
        for group, block, frame, _ in made:
            block.confirm(frame)
            group.confirmed(frame)
        if full:
            self._seal_generation(t, lambda: t.open_bytes >= self._block_max_bytes)
        if not all(frame.durable() for frame in held):  # taken for held, but the write holding it failed
            raise _HeldWriteFailed(rows)
        return rows

    def fence_txn(self, txn_id: int) -> None:
        """The master is resolving ``txn_id``: refuse its writes from now on."""
        with self._lock:
            self._fenced.add(txn_id)

    def _check_txn(self, txn_id: int) -> None:
        if txn_id == AUTOCOMMIT:
            return
        fenced = txn_id in self._fenced
        if fenced or txn_id >= self._snapshot.next_txn or txn_id not in self._snapshot.open:
            self._snapshot = self._master.txn_snapshot()  # it may have begun (or ended) since
        snapshot = self._snapshot
        if fenced:
            with self._lock:
                self._fenced -= {t for t in self._fenced if snapshot.resolved(t)}
        if fenced and txn_id in snapshot.open:
            raise TransactionError(f"transaction {txn_id} is being committed or aborted; it takes no more writes")
        if txn_id >= snapshot.next_txn:
            raise TransactionError(f"transaction {txn_id} was never begun at the master")
        if txn_id not in snapshot.open:
            state = "aborted" if txn_id in snapshot.aborted else "committed"
            raise TransactionError(f"transaction {txn_id} is already {state}; begin a new one")


def _file_group_rows(
    meta: TableMeta, table: pa.Table, keyless_bucket: int
) -> tuple[tuple[str, int, np.ndarray | None], ...]:
    """(partition, bucket, row indices, ascending) of each file group ``table`` touches; None for
    the indices when one file group takes every row in order (one bucket, no partitions:
    no key hashing, no copy). Bad record keys are refused either way. An append-only
    table's rows all go to ``keyless_bucket`` (of each partition)."""
    if meta.keyless:
        if not meta.config.partition_fields:
            return (("", keyless_bucket, None),)
        return tuple(spread(meta, table, [keyless_bucket]))
    if meta.config.buckets == 1 and not meta.config.partition_fields:
        check_keys(table, meta.config.record_key_fields)
        return (("", 0, None),)
    return file_groups(meta, table)
