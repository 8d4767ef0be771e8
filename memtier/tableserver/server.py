"""The table server core: blocks of the file groups it owns, in memory and in WAL files.

Plain Python, no Ray: :mod:`memtier.cluster` wraps it in an actor, tests drive it
directly. Writes are validated, appended to the table's WAL stream (a frame per file
group's open block; durable on return, one sync shared by every file group of the write and
by concurrent writers), then to memory, then acknowledged. Sealed blocks of resolved transactions flush into Hudi log files through
the master, which owns the timeline. Memory is bounded: sealed blocks are evicted (their
rows stay in the WAL) and read back when a reader or a flush needs them.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from memtier import failpoints
from memtier.config import FlushWorker, TableServerConfig, WalConfig
from memtier.errors import (
    BatchTooLargeError,
    FencedError,
    MemtierError,
    NotOwnerError,
    RpcError,
    SchemaEvolutionError,
    TransactionError,
    WalClosedError,
)
from memtier.exchange import AUTOCOMMIT, FlushedBlock, TxnSnapshot
from memtier.hudi.deletes import DELETE_FLAG, flagged_schema, prepare_write
from memtier.hudi.evolution import merge, project
from memtier.hudi.filenames import bucket_file_id, bucket_or_none
from memtier.hudi.filters import Filter, pinned_values, validate
from memtier.hudi.fsview import FileSystemView, pending_clustering
from memtier.hudi.keyread import KeyFilter
from memtier.hudi.keys import check_keys
from memtier.hudi.routing import file_groups, producer_bucket, spread
from memtier.hudi.schema import conform, to_table
from memtier.hudi.tablemeta import TableMeta
from memtier.io import FileIO, join, open_fileio, parent, relpath, sweep_temp_files
from memtier.latency import LatencyWindow
from memtier.tableserver.block import Block, Frame, Share, frames_of
from memtier.tableserver.filegroup import FileGroup, FileGroupKey
from memtier.tableserver.flush import FlushGroup, FlushRows, FramePlaces, Planned, WalRows
from memtier.tableserver.flusher import Flusher, InlineFlusher, ProcessFlusher
from memtier.tableserver.master_link import MasterLink
from memtier.tableserver.memory import MemoryAccount
from memtier.wal import (
    GroupCommitter,
    PendingAppend,
    RecoveredBlock,
    StreamFrame,
    WalHeader,
    WalStream,
    delete_expired,
    list_wals,
    recover_blocks,
    stale_segments,
    stream_directory,
)
from memtier.wal.fence import new_life
from memtier.wal.format import Selection, frame_payload
from memtier.wal.storage import WalEntry

__all__ = ["DELETE_FLAG", "FILE_ID_COLUMN", "PARTITION_COLUMN", "UNRESOLVED", "TableServer", "WriteAck"]

log = logging.getLogger(__name__)

#: Columns a block read carries besides the data: the rows' file group.
PARTITION_COLUMN = "__memtier_partition"
FILE_ID_COLUMN = "__memtier_file_id"
#: Schema metadata key of a read's answer holding rows of transactions its snapshot left
#: unresolved (see :meth:`TableServer.read`).
UNRESOLVED = b"memtier.unresolved"
UNRESOLVED_METADATA = {UNRESOLVED: b"1"}
_NO_PRODUCER = bytes(16)
#: How long flushed blocks stay listed for readers that planned before the flush.
_FLUSHED_GRACE_S = 60.0
#: How often expired WAL files are looked for.
_RETENTION_EVERY_S = 60.0
#: ... or this often (seconds) while a table's closed WAL segments exceed the retention bytes.
_RETENTION_SOON_S = 5.0
#: What a flush round holds besides its blocks, wherever it runs (in this process or the
#: flush worker), in multiples of their bytes: the rows gathered, keyed, merged and
#: encoded (Avro log blocks take ~2.5x the Arrow bytes, their meta columns ~1.6x); counted against the memory budget
#: meanwhile (measured: bench/RESULTS.md, the memory bound).
FLUSH_COPIES = 6
#: What a flush round adds when it runs in the flush worker process: the rows' IPC copy
#: sent to it (the worker's memory counts against this server's budget).
WORKER_COPY = 1
#: How long a write waiting for room sleeps before it looks again (a flush ending wakes it).
_ROOM_WAIT_S = 0.05


@dataclass(frozen=True)
class WriteAck:
    """What a write acknowledgement reports."""

    rows: int  # rows appended (durable in the WAL, in memory)
    duplicate_rows: int  # rows of a retried write already held: dropped
    file_groups: int
    evicted_bytes: int  # memory freed to admit this write (back-pressure, never an error)

    def to_dict(self) -> dict[str, int]:
        return {
            "rows": self.rows,
            "duplicate_rows": self.duplicate_rows,
            "file_groups": self.file_groups,
            "evicted_bytes": self.evicted_bytes,
        }


@dataclass
class _Table:
    """One table as this server serves it (``name``: the cluster's name for it, which
    need not be the Hudi table name of a registered table)."""

    name: str
    meta: TableMeta
    stream: WalStream
    owned: set[int] = field(default_factory=set)
    groups: dict[FileGroupKey, FileGroup] = field(default_factory=dict)
    file_ids: dict[tuple[str, int], str] = field(default_factory=dict)  # from the Hudi table
    flushed: dict[FileGroupKey, int] = field(default_factory=dict)  # last block in the table
    flush_lock: threading.Lock = field(default_factory=threading.Lock)
    publish: threading.Lock = field(default_factory=threading.Lock)  # a flush's completion vs reads
    acknowledged: Tally = field(default_factory=lambda: Tally())
    #: The generation of the blocks opened now: the table's open blocks are sealed together
    #: (a write to several file groups is one record in the WAL stream that each of their
    #: blocks selects rows of, so a flush round taking whole generations reads each write
    #: once), and the next blocks are of the next generation.
    generation: int = 0
    open_bytes: int = 0  # bytes appended to the current generation
    generation_lock: threading.Lock = field(default_factory=threading.Lock)
    gone: bool = False  # no longer served here (given up, or lost with a fenced life)

    def open_blocks(self) -> list[Block]:
        """Its blocks still open (one per file group at most)."""
        return [g.blocks[-1] for g in list(self.groups.values()) if g.blocks and not g.blocks[-1].sealed]

    _stored: tuple[TableMeta, pa.Schema] | None = None
    _fitting: tuple[TableMeta, pa.Schema] | None = None

    @property
    def stored_schema(self) -> pa.Schema:
        """The schema of the rows it writes into memory and the WAL now (blocks written
        under an older schema keep theirs)."""
        return self.stored_for(self.meta)

    def stored_for(self, meta: TableMeta) -> pa.Schema:
        """The schema rows written under ``meta`` are stored with: its physical schema,
        delete flag last (made once per schema)."""
        known = self._stored
        if known is None or known[0] is not meta:
            known = self._stored = (meta, flagged_schema(meta.physical))
        return known[1]

    def fits(self, meta: TableMeta, schema: pa.Schema) -> bool:
        """Whether write batches of ``schema`` fit the table as ``meta`` has it (no column or
        type it lacks); the last such schema is remembered (most batches share one)."""
        if self._fitting is not None and self._fitting[0] is meta and self._fitting[1].equals(schema):
            return True
        if merge(meta.schema, schema, meta.roles)[1]:
            return False
        self._fitting = (meta, schema)
        return True

    def adopt(self, meta: TableMeta) -> None:
        """Write under ``meta``'s (newer) schema from now on; the caller holds every file
        group's lock and seals the open blocks."""
        self.meta = meta
        for group in self.groups.values():
            group.schema = self.stored_for(meta)


class _SchemaMoved(Exception):
    """The table's schema changed while a write was prepared under the one before."""


@dataclass
class Tally:
    """Rows and bytes acknowledged so far; thread-safe."""

    rows: int = 0
    bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, rows: int, nbytes: int) -> None:
        with self._lock:
            self.rows += rows
            self.bytes += nbytes


class TableServer:
    """Blocks of the buckets this server owns, for every table; thread-safe."""

    def __init__(
        self,
        server_id: str,
        master: MasterLink,
        wal_root: str,
        *,
        config: TableServerConfig | None = None,
        wal_config: WalConfig | None = None,
        wal_storage_options: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        flush_cpus: frozenset[int] | None = None,
    ) -> None:
        self.server_id = server_id
        #: This process's life (:mod:`memtier.wal.fence`): its WAL streams are fenced by it
        #: once the master gives its buckets to others; a new one after :meth:`reset`.
        self.life = new_life()
        self.config = config or TableServerConfig()
        self._master = master
        self._wal_root = wal_root
        self._wal_io: FileIO = open_fileio(wal_root, wal_storage_options)
        self._committer = GroupCommitter(wal_config, clock=clock)
        self._clock = clock
        self._tables: dict[str, _Table] = {}
        self._lock = threading.Lock()
        self._admission = threading.Condition()  # one write at a time makes room and takes it
        self._flushing = 0  # bytes running flushes hold: what a write waits for when memory is full
        self.memory = MemoryAccount(self.config.memory_budget)
        self.write_latency = LatencyWindow()
        self.read_latency = LatencyWindow()  # a read of this server's blocks, inside the server
        self.flush_latency = LatencyWindow()  # each flush commit, encoding and files included
        self.gc_pauses = LatencyWindow()  # the process's garbage collections, when watched
        self.metrics_url: str | None = None  # where the process serves /metrics, if it does
        self._snapshot = TxnSnapshot(1)
        self._last_flush = time.monotonic()
        self._last_retention = time.monotonic()
        #: Deletes expired WAL segments: a large file goes a few MiB at a time (diskpacing),
        #: which is not for the thread that seals and flushes.
        self._retention = ThreadPoolExecutor(1, thread_name_prefix="memtier-wal-retention")
        self._retention_run: Future[None] | None = None
        self._wal_config = wal_config or WalConfig()
        self._closed = False
        self._fenced: set[int] = set()  # transactions being resolved: their writes are refused
        self.flusher: Flusher = (
            ProcessFlusher(self.config.flush_timeout.total_seconds(), self._wal_io, cpus=flush_cpus)
            if self.config.flush_worker is FlushWorker.PROCESS else InlineFlusher(self._wal_io)
        )

    # == ownership =======================================================================
    def acquire(self, table: str, buckets: Iterable[int], *, life: str | None = None) -> None:
        """Serve ``buckets`` of ``table``: recover their unflushed blocks from the WAL first.
        The master names the ``life`` it gives them to: refused if this is another."""
        if life is not None and life != self.life:
            raise FencedError(f"table server {self.server_id} lives {self.life}, not {life}: "
                              f"buckets of {table!r} were given to a life it left")
        t = self._open_table(table)
        wanted = set(buckets) - t.owned
        if not wanted:
            return
        flushed = {(f.partition, f.file_id): f.block_id for f in self._master.flushed_blocks(table)}
        t.flushed.update({FileGroupKey(p, f): b for (p, f), b in flushed.items()})
        wal_dir = join(self._wal_root, table)

        def unflushed(h: WalHeader) -> bool:
            """A block the Hudi table lacks: recovered whole (of the others only the
            producer sequence numbers are read, so retried writes are still dropped)."""
            return h.block_id > flushed.get((h.partition, h.file_group), 0)

        files: dict[FileGroupKey, list[WalEntry]] = {}
        for entry in list_wals(self._wal_io, wal_dir):  # block files of older versions
            if bucket_or_none(entry.name.file_group) in wanted:
                key = FileGroupKey(relpath(wal_dir, parent(entry.path)), entry.name.file_group)
                files.setdefault(key, []).append(entry)
        streamed: dict[FileGroupKey, list[RecoveredBlock]] = {}
        for found in recover_blocks(self._wal_io, stream_directory(self._wal_root, table),
                                    lambda h: bucket_or_none(h.file_group) in wanted, unflushed):
            key = FileGroupKey(found.header.partition, found.header.file_group)
            streamed.setdefault(key, []).append(found)
        with t.flush_lock:
            for key in files.keys() | streamed.keys():
                group = self._new_group(t, key)
                through = flushed.get((key.partition, key.file_id), 0)
                recovered = group.recover(files.get(key, []), streamed.get(key, []), through)
                for block in recovered:
                    self.memory.add(block.memory)
                with t.generation_lock:  # blocks opened from now on come after the recovered ones
                    t.generation = max(t.generation, len(recovered))
                t.groups[key] = group
            t.owned |= wanted
        log.info("%s serves buckets %s of %s (%d file groups recovered)",
                 self.server_id, sorted(wanted), table, len(files.keys() | streamed.keys()))

    def release(self, table: str, buckets: Iterable[int] | None = None) -> None:
        """Stop serving ``buckets`` (all, by default): seal their open blocks, drop them
        from memory. Their unflushed blocks stay in the WAL for the next owner."""
        with self._lock:
            t = self._tables.get(table)
        if t is None:
            return
        with t.flush_lock:
            gone = set(t.owned if buckets is None else buckets)
            t.owned -= gone
            for key in [k for k in t.groups if bucket_or_none(k.file_id) in gone]:
                group = t.groups.pop(key)
                with group.lock:
                    group.seal_open()
                    for block in group.blocks:
                        block.settle()  # durable in the stream before the next owner reads it
                        self.memory.release(block.drop())
            if not t.owned:
                with self._lock:
                    self._tables.pop(table, None)
                t.gone = True
                t.stream.close()

    def owned(self, table: str) -> set[int]:
        with self._lock:
            t = self._tables.get(table)
        return set(t.owned) if t is not None else set()

    def _open_table(self, table: str) -> _Table:
        with self._lock:
            t = self._tables.get(table)
            if t is not None:
                return t
        location = self._master.table_location(table)
        meta = TableMeta.load(open_fileio(location.path, location.storage_options), location.path)
        view = FileSystemView.build(meta.io, meta.base_path, meta.timeline())
        file_ids = {(p, b): f for p, f in view.file_groups if (b := bucket_or_none(f)) is not None}
        with self._lock:
            t = self._tables.get(table)
            if t is None:
                stream = WalStream(
                    self._wal_io,
                    stream_directory(self._wal_root, table),
                    table=table,
                    owner=self.server_id,
                    life=self.life,
                    committer=self._committer,
                    segment_bytes=self._wal_config.segment_bytes,
                    segment_age_s=self._wal_config.segment_age.total_seconds(),
                )
                t = self._tables[table] = _Table(table, meta, stream, file_ids=file_ids)
            return t

    def _check_owned(self, t: _Table, buckets: set[int]) -> None:
        """:class:`NotOwnerError` unless this server still serves every one of ``buckets``."""
        foreign = sorted(buckets if t.gone else buckets - t.owned)
        if foreign:
            raise NotOwnerError(
                f"buckets {foreign} of table {t.name!r} are not on table server {self.server_id}; "
                "refresh the routing and retry"
            )

    def _table(self, table: str) -> _Table:
        if self._closed:
            raise RpcError(f"table server {self.server_id} is shut down")
        with self._lock:
            t = self._tables.get(table)
        if t is None:  # the master decides whether it exists; here it is just not served (yet)
            raise NotOwnerError(f"table {table!r} is not served by table server {self.server_id}")
        return t

    def _new_group(self, t: _Table, key: FileGroupKey) -> FileGroup:
        return FileGroup(
            t.name, key, t.stored_schema, self._wal_io, self._committer,
            flushed_through=t.flushed.get(key, 0), clock=self._clock,
        )

    # == writes ==========================================================================
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
        every file group that already holds it.
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
                rows = self._append(t, meta, whole, buckets, pieces, Share(nbytes, len(pieces)), txn_id,
                                    producer_id, producer_seq)
                break
            except _SchemaMoved:  # changed while the batch was prepared: prepared again, under the new one
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

    def _schema_for(self, t: _Table, batch: pa.Table) -> TableMeta:
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

    def _refresh_schema(self, t: _Table) -> TableMeta:
        """Adopt the table's newest schema (from its timeline) if it is newer than the one
        this server writes: every open block is sealed (a block's rows keep the schema it
        was written under, in memory and in the WAL) and blocks opened from now on are
        of the newer one. The table as it is now written."""
        location = self._master.table_location(t.name)
        newest = TableMeta.load(open_fileio(location.path, location.storage_options), location.path)
        groups = sorted(list(t.groups.values()), key=lambda g: g.key)
        with _all_held([g.lock for g in groups]):
            if newest.schema_version > t.meta.schema_version:
                for group in groups:
                    group.seal_open()
                t.adopt(newest)
                with t.generation_lock:
                    t.generation += 1
                    t.open_bytes = 0
                log.info("%s writes %s under schema version %d", self.server_id, t.name, newest.schema_version)
            return t.meta

    def _admit(self, incoming: int) -> int:
        """Make room for ``incoming`` bytes and take them from the budget at once, so that
        concurrent writes cannot all count on the same room; the bytes evicted. What is
        not appended in the end is given back by :meth:`_append`.

        When eviction cannot make the room because flushes hold the memory, the write
        waits for them (never an error); with no flush running it is admitted anyway (a
        write larger than all the memory that can be freed)."""
        with self._admission:
            evicted = self._make_room(incoming)
            while self.memory.over(incoming) and self._flushing:
                self._admission.wait(_ROOM_WAIT_S)
                evicted += self._make_room(incoming)
            self.memory.add(incoming)
        return evicted

    def _hold_for_flush(self, nbytes: int) -> None:
        """Take a flush's transient bytes from the budget (evicting to make room: the flush
        frees memory, so it does not wait)."""
        with self._admission:
            self._make_room(nbytes)
            self.memory.add(nbytes)
            self._flushing += nbytes

    def _release_flush(self, nbytes: int) -> None:
        """A flush's transient bytes are free: writes waiting for room go on."""
        with self._admission:
            self.memory.release(nbytes)
            self._flushing -= nbytes
            self._admission.notify_all()

    def _append(
        self,
        t: _Table,
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
        table's schema changed since, nothing is appended (:class:`_SchemaMoved`)."""
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
            with _all_held([g.lock for g in locked]):
                self._check_owned(t, buckets)
                if t.meta is not meta:
                    raise _SchemaMoved
                fresh = [
                    (group, selection)
                    for group, (_, selection) in zip(groups, pieces, strict=True)
                    if not group.is_duplicate(producer_id, producer_seq)
                ]
                if not fresh:
                    return 0
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
        for _, block, frame, _ in made:
            block.confirm(frame)
        if full:
            self._seal_generation(t, lambda: t.open_bytes >= self._block_max_bytes)
        return rows

    def _seal_generation(self, t: _Table, due: Callable[[], bool]) -> None:
        """Seal every open block of ``t`` together if ``due()`` still holds once every
        file group's lock is held (taken in key order, as appends take theirs); blocks
        opened from then on are of the next generation."""
        groups = sorted(list(t.groups.values()), key=lambda g: g.key)
        with _all_held([g.lock for g in groups]):
            if not due():
                return
            for group in groups:
                group.seal_open()
            with t.generation_lock:
                t.generation += 1
                t.open_bytes = 0

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

    # == memory ==========================================================================
    def _blocks(self) -> list[tuple[_Table, FileGroup, Block]]:
        with self._lock:
            tables = list(self._tables.values())
        return [(t, g, b) for t in tables for g in list(t.groups.values()) for b in list(g.blocks)]

    def _make_room(self, incoming: int) -> int:
        """Free memory until ``incoming`` bytes fit the budget; the bytes freed.

        Sealed blocks go first (flushed ones, then the oldest unflushed: their rows stay
        in the WAL and are read back when needed); only when those do not suffice are the
        open blocks of the tables holding most sealed (a generation) and evicted too.
        """
        need = self.memory.over(incoming)
        if need <= 0:
            return 0
        freed = self._evict_sealed(need)
        with self._lock:
            tables = list(self._tables.values())
        held = [(sum(b.memory for b in t.open_blocks()), t) for t in tables]
        for memory, t in sorted(held, key=lambda mt: -mt[0]):
            if freed >= need or not memory:
                break
            self._seal_generation(t, lambda: True)  # (its blocks share their writes' memory)
            freed += self._evict_sealed(need - freed)
        return freed

    def _evict_sealed(self, need: int) -> int:
        candidates = [b for _, _, b in self._blocks() if b.resident and b.memory and b.sealed and not b.pinned]
        candidates.sort(key=lambda b: (b.flushed_instant is None, b.created))
        freed = 0
        for block in candidates:
            if freed >= need:
                break
            released = block.evict()
            self.memory.release(released)
            freed += released
        return freed

    def evict(self) -> int:
        """Seal every block and drop all of them from memory (they stay in their WAL
        files and are read back on demand); the bytes freed."""
        with self._lock:
            tables = list(self._tables.values())
        for t in tables:
            self._seal_generation(t, lambda: True)
        freed = 0
        for _, _, block in self._blocks():
            released = block.evict()
            self.memory.release(released)
            freed += released
        return freed

    # == reads ===========================================================================
    def read(
        self,
        table: str,
        *,
        as_of_instant: str | None,
        snapshot: TxnSnapshot | None = None,
        committed_only: bool = False,
        columns: list[str] | None = None,
        buckets: Iterable[int] | None = None,
        key_filters: Sequence[Filter] = (),
        schema_version: int | None = None,
    ) -> pa.Table:
        """Rows of this server's blocks that the Hudi table lacks as of ``as_of_instant``
        (None: a table with no commits), in write order per file group, with the file
        group in two extra columns, and the delete flag of each row (:data:`DELETE_FLAG`).
        Rows of transactions the ``snapshot`` says are aborted are left out, and with
        ``committed_only`` those not committed in it. ``key_filters`` (on record-key
        columns only) keep the rows of the keys they pass.

        The answer's schema metadata holds :data:`UNRESOLVED` when rows of the keys
        asked for belong to transactions the ``snapshot`` has open or does not know yet,
        shown or not (their outcome may have changed since it was taken: a reader that
        reused an old snapshot asks the master for a new one). Buckets this server does not serve
        (any more) raise :class:`NotOwnerError`, not an empty answer, as does a read planned
        under an older ``schema_version`` of the table than this server writes (the rows
        are those of the table's schema then: blocks written under an older one read up to it)."""
        started = time.perf_counter()
        t = self._table(table)
        checked = validate(key_filters, t.meta.config.record_key_fields)
        pinned = pinned_values(checked)  # frames holding none of them are skipped
        wanted = set(buckets) if buckets is not None else None
        if wanted is not None:
            self._check_owned(t, wanted)
        unresolved = False
        batches, partitions, file_ids = [], [], []
        with t.publish:  # a flush completing now: its blocks are flushed or not, as for the plan
            missing = [
                (key, block)
                for key in sorted(t.groups)
                if wanted is None or bucket_or_none(key.file_id) in wanted
                for block in list(t.groups[key].blocks)
                if block.missing_from(as_of_instant)
            ]
        meta = t.meta  # (after the blocks: each was written under it or an older schema)
        if schema_version is not None and schema_version != meta.schema_version:
            if schema_version > meta.schema_version:  # a reader that heard of a change before this server
                meta = self._refresh_schema(t)
            if meta.schema_version > schema_version:
                raise NotOwnerError(f"the schema of table {table!r} changed (version {meta.schema_version}, the "
                                    f"read's {schema_version}): plan the read again")
        stored = t.stored_for(meta)
        names = list(columns) if columns is not None else list(meta.physical.names)
        names = names if DELETE_FLAG in names else [*names, DELETE_FLAG]
        schema = pa.schema([stored.field(n) for n in names])
        evicted = [block for _, block in missing if not block.resident]  # read back in one pass
        read_back = dict(zip(map(id, evicted), frames_of(evicted) if evicted else [], strict=True))
        for key, block in missing:
            current = block.header.schema.equals(stored)
            for frame, rows in _frames_of_keys(block, pinned, read_back.get(id(block))):
                if snapshot is not None and not snapshot.resolved(frame.txn_id):
                    unresolved = True  # shown (latest) or hidden (committed): either may change
                if snapshot is not None and not snapshot.visible(
                    frame.txn_id, committed_only=committed_only
                ):
                    continue
                batches.append(frame.rows_of(names, rows) if current else _read_up(frame, rows, schema))
                partitions.append((key.partition, batches[-1].num_rows))
                file_ids.append((key.file_id, batches[-1].num_rows))
        data = pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
        data = data.append_column(PARTITION_COLUMN, _repeated(partitions)).append_column(
            FILE_ID_COLUMN, _repeated(file_ids)
        )
        keys = KeyFilter.of(checked)  # not acero's filter: it costs ~0.1 ms a frame
        data = data if keys is None else keys.filter(data)
        if t.stream.fenced():  # another server may serve newer writes of these buckets
            self.reset(t.stream.life)
            raise FencedError(f"table server {self.server_id} lost the buckets of {table!r} to another; "
                              "refresh the routing and read again")
        self.read_latency.add(time.perf_counter() - started)
        return data.replace_schema_metadata(UNRESOLVED_METADATA) if unresolved else data

    # == flushes =========================================================================
    def maintain(self) -> list[str]:
        """Periodic work: seal blocks past their age, roll WAL segments past theirs,
        flush when due or under memory pressure, forget long-flushed blocks. Returns the
        instants flushed."""
        now = time.monotonic()
        max_age = self.config.block_max_age.total_seconds()
        with self._lock:
            streams = [t.stream for t in self._tables.values()]
        for stream in streams:
            stream.roll_idle()
        with self._lock:
            tables = list(self._tables.values())
        for t in tables:
            def aged(t: _Table = t) -> bool:
                return any(now - b.created >= max_age for b in t.open_blocks())

            if aged():
                self._seal_generation(t, aged)
        instants: list[str] = []
        due = now - self._last_flush >= self.config.flush_interval.total_seconds()
        if due or self.memory.pressure() > 0.7:
            self._last_flush = now
            instants = self.flush()
        for group in {id(g): g for _, g, _ in self._blocks()}.values():
            self.memory.release(group.forget_flushed(now - _FLUSHED_GRACE_S))
        if self._retention_due(now, streams) and (self._retention_run is None or self._retention_run.done()):
            self._last_retention = now
            self._retention_run = self._retention.submit(self._sweep_wal)
        return instants

    def _retention_due(self, now: float, streams: list[WalStream]) -> bool:
        """Whether to run the WAL retention sweep: every :data:`_RETENTION_EVERY_S`, or
        every :data:`_RETENTION_SOON_S` while a stream's closed segments pass the
        retention bytes (they may be flushed by now)."""
        elapsed = now - self._last_retention
        return elapsed >= _RETENTION_EVERY_S or elapsed >= _RETENTION_SOON_S and any(
            s.closed_bytes() > self._wal_config.retention_bytes for s in streams
        )

    def _sweep_wal(self) -> None:
        try:
            self.delete_expired_wals()
        except Exception:
            log.exception("%s: deleting expired WAL failed; tried again in a minute", self.server_id)

    def delete_expired_wals(self) -> int:
        """Delete what the WAL holds of blocks flushed into the Hudi table (never a block
        that is not): stream segments whose every block is, closed longer ago than the
        retention period or the oldest beyond the retention bytes (:func:`retired`; this
        server's and those earlier or other servers' incarnations left in the table's
        stream directory); block files of older versions past the retention period; and
        temporary files crashes left (:func:`~memtier.io.sweep_temp_files`). How many
        files were deleted."""
        deleted = 0
        with self._lock:
            tables = list(self._tables.values())
        now, retention = self._clock(), self._wal_config.retention.total_seconds()
        for t in tables:
            wal_dir = join(self._wal_root, t.name)
            flushed = {(f.partition, f.file_id): f.block_id for f in self._master.flushed_blocks(t.name)}

            def is_flushed(h: WalHeader, flushed: dict[tuple[str, str], int] = flushed) -> bool:
                return h.block_id <= flushed.get((h.partition, h.file_group), 0)

            def file_flushed(entry: WalEntry, t: _Table = t, wal_dir: str = wal_dir) -> bool:
                if bucket_or_none(entry.name.file_group) not in t.owned:
                    return False  # another server's file group: its owner decides
                key = FileGroupKey(relpath(wal_dir, parent(entry.path)), entry.name.file_group)
                return entry.name.block_id <= t.flushed.get(key, 0)

            stale = stale_segments(  # unmodified for two segment ages: no writer appends to them
                self._wal_io, stream_directory(self._wal_root, t.name), keep_incarnation=t.stream.incarnation,
                is_flushed=is_flushed, now=now, min_age_s=2 * self._wal_config.segment_age.total_seconds(),
            )
            deleted += t.stream.delete_flushed(
                is_flushed, retention_s=retention, retention_bytes=self._wal_config.retention_bytes, now=now,
                others=stale,
            )
            deleted += len(delete_expired(
                self._wal_io, wal_dir, is_flushed=file_flushed, now=now,
                retention=self._wal_config.retention,
            ))
            deleted += len(sweep_temp_files(self._wal_io, wal_dir, now=now))  # left by crashes
        return deleted

    def flush(self, table: str | None = None, *, seal: bool = False) -> list[str]:
        """Flush sealed blocks of resolved transactions (``seal``: seal open blocks
        first, so everything acknowledged goes); the instants committed."""
        with self._lock:
            tables = [self._tables[table]] if table in self._tables else (
                list(self._tables.values()) if table is None else []
            )
        if table is not None and not tables:
            raise NotOwnerError(f"table {table!r} is not served by table server {self.server_id}")
        instants = []
        for t in tables:
            if seal:
                self._seal_generation(t, lambda: True)
            more = True
            while more:  # rounds of at most _flush_round_bytes, each its own commit
                started = time.perf_counter()
                try:
                    instant, more = self._flush_table(t)
                except FencedError:
                    self.reset(t.stream.life)
                    raise
                if instant is not None:
                    self.flush_latency.add(time.perf_counter() - started)
                    instants.append(instant)
        return instants

    @property
    def _block_max_bytes(self) -> int:
        """A table's open blocks are sealed (together) once they hold
        ``tableserver.block-max-bytes``, or a sixteenth of the memory budget when that is
        less, so one generation's flush (its blocks and their :data:`FLUSH_COPIES`) takes
        at most half the budget."""
        return max(1, min(self.config.block_max_bytes, self.config.memory_budget // 16))

    @property
    def _flush_round_bytes(self) -> int:
        """The most block bytes one flush commit takes (one generation at least): evicted
        blocks are read back from their WAL to be flushed, and the flush copies the rows
        (:data:`FLUSH_COPIES`), so a backlog is flushed in rounds that fit in memory."""
        return self._block_max_bytes

    def _flush_table(self, t: _Table) -> tuple[str | None, bool]:
        """Flush one round of ready blocks: the instant (None if nothing was ready) and
        whether ready blocks were left for another round."""
        with t.flush_lock:
            snapshot = self._master.txn_snapshot()
            # file groups a clustering is rewriting: their blocks wait for it to complete
            held = pending_clustering(t.meta.io, t.meta.base_path, t.meta.timeline())
            ready: list[tuple[FileGroup, list[Block]]] = []
            for group in list(t.groups.values()):
                if (group.key.partition, group.key.file_id) not in held:
                    ready.append((group, list(itertools.takewhile(  # blocks flush in order
                        lambda b: b.sealed and b.resolved(snapshot), group.unflushed()))))
            work, more = _round(ready, self._flush_round_bytes)
            if not work:
                return None, False
            taken = sum(b.nbytes for _, blocks in work for b in blocks)
            # taken from the budget while flushing: the copies here and in the flush worker,
            # and evicted blocks read back
            copies = FLUSH_COPIES + (WORKER_COPY if self.config.flush_worker is FlushWorker.PROCESS else 0)
            transient = copies * taken + sum(b.nbytes for _, blocks in work for b in blocks if not b.resident)
            for _, blocks in work:
                for block in blocks:
                    block.pinned = True  # the flush holds their rows: evicting them frees nothing
            self._hold_for_flush(transient)
            try:
                flushed = [FlushedBlock(g.key.partition, g.key.file_id, b[-1].block_id) for g, b in work]

                def published(instant: str) -> None:
                    for group, blocks in work:
                        for block in blocks:
                            block.mark_flushed(instant)
                        t.flushed[group.key] = blocks[-1].block_id

                meta = t.meta  # (every block taken was written under it or an older schema)
                instant, moved = self._commit_flush(
                    t, meta, [self._rows(t, meta, g, b, snapshot) for g, b in work], flushed, published
                )
            finally:
                for _, blocks in work:
                    for block in blocks:
                        block.pinned = False
                self._release_flush(transient)
            for partition, file_id in moved:
                bucket = bucket_or_none(file_id)
                if bucket is not None:
                    t.file_ids[(partition, bucket)] = file_id
            return instant, more

    def _rows(
        self, t: _Table, meta: TableMeta, group: FileGroup, blocks: list[Block], snapshot: TxnSnapshot
    ) -> tuple[FlushGroup, FlushRows]:
        """The blocks' committed rows in write order, delete flags included, as ``meta``'s
        schema has them: where they lie in the WAL stream (the flusher reads them there),
        or the rows themselves (read back from the WAL if evicted) for blocks written under
        an older schema (read up to it) and blocks of older versions (from their block files)."""
        new = (group.key.partition, bucket_or_none(group.key.file_id)) not in t.file_ids
        flush_group = FlushGroup(group.key.partition, group.key.file_id, new)
        stored = t.stored_for(meta)
        if all(b.header.schema.equals(stored) for b in blocks):
            placed = [p for b in blocks if (p := b.wal_frames(snapshot.committed)) is not None]
            if len(placed) == len(blocks):
                return flush_group, WalRows(FramePlaces.joined([p for p, _ in placed]), sum(n for _, n in placed))
        batches = [project(f.batch, stored) for b in blocks for f in b.frames() if snapshot.committed(f.txn_id)]
        return flush_group, pa.Table.from_batches(batches, schema=stored)

    def _commit_flush(
        self, t: _Table, meta: TableMeta, work: list[tuple[FlushGroup, FlushRows]], flushed: list[FlushedBlock],
        published: Callable[[str], None],
    ) -> tuple[str, list[tuple[str, str]]]:
        """One deltacommit through the master: requested, inflight (naming the files the
        flusher plans), files written durably by the flusher, completed with the flushed
        blocks recorded in it, and ``published(instant)`` (the blocks marked flushed) at
        once for readers of this server. The instant, and the file groups written (a
        bucket a clustering moved to a new file group goes there)."""
        work = [(g, rows) for g, rows in work if rows.num_rows]
        touched = [(g.partition, g.file_id) for g, _ in work]
        instant = self._master.begin_commit(t.name, "deltacommit", owner=self.server_id, file_groups=touched,
                                            life=t.stream.life)

        def planned(plan: Planned) -> None:
            self._master.commit_inflight(t.name, instant, plan.metadata, life=t.stream.life)

        try:
            plan, stats = self.flusher.run(meta, instant, [g for g, _ in work], [r for _, r in work], planned)
            failpoints.hit(failpoints.BEFORE_FLUSH_COMMIT)
            with t.publish:  # no read sees the instant's rows both in its files and in blocks
                self._master.complete_flush(t.name, instant, stats, flushed, life=t.stream.life)
                published(instant)
        except BaseException as e:
            if isinstance(e, FencedError):  # this life lost its buckets: nothing to debug
                log.warning("flush %s of %s refused (%s); rolling it back", instant, t.name, e)
            else:
                log.exception("flush %s of %s failed; rolling it back", instant, t.name)
            try:
                self._master.abort_commit(t.name, instant)
            except Exception:  # the master rolls pending flushes back on its own restart
                log.exception("could not roll back flush %s of %s", instant, t.name)
            raise
        return instant, plan.file_groups

    # == the master ======================================================================
    def join(self, location: str) -> None:
        """Register with the master as this life, serving at ``location``; a life the
        master fenced meanwhile is left first (:meth:`reset`)."""
        life = self.life
        try:
            self._master.register_server(self.server_id, location, self.config.memory_budget,
                                         self.config.max_batch_rows, life=life)
        except FencedError:
            self.reset(life)
            self._master.register_server(self.server_id, location, self.config.memory_budget,
                                         self.config.max_batch_rows, life=self.life)

    def heartbeat(self, location: str, extra: Mapping[str, Any] | None = None) -> None:
        """Report this life's status (with ``extra``) to the master. Not registered (the
        master restarted, or took this server for dead): register again, after a reset if
        the master says this life was fenced (its first heartbeat after waking from a
        pause tells it so)."""
        life = self.life
        reply = self._master.heartbeat(self.server_id, {**self.status(), **(extra or {})},
                                       self.bucket_memory(), life=life)
        if reply.get("registered"):
            for table, version in (reply.get("schemas") or {}).items():  # changes it missed hearing of
                self.apply_schema(table, int(version))
            return
        if reply.get("fenced"):
            self.reset(life)
        self.join(location)

    def reset(self, lost: str) -> None:
        """Life ``lost`` of the server lost its buckets: the master took it for dead (it
        was paused, or cut off) and gave them to others, which recovered them from the WAL
        after fencing it. Unless a reset left that life already: drop every table from
        memory without flushing (the new owners hold what it acknowledged) and start a
        new life, which registers anew."""
        with self._lock:
            if lost != self.life:
                return
            tables, self._tables = list(self._tables.values()), {}
            self.life = new_life()
        log.warning("%s: life %s lost its buckets; dropped %d tables from memory, now life %s",
                    self.server_id, lost, len(tables), self.life)
        for t in tables:
            groups = sorted(list(t.groups.values()), key=lambda g: g.key)
            with _all_held([g.lock for g in groups]):
                t.gone = True
                for group in groups:
                    for block in group.blocks:
                        self.memory.release(block.drop())
                t.groups.clear()
                t.owned.clear()
            with contextlib.suppress(MemtierError):  # fenced: its last sync may be refused
                t.stream.close()

    # == status ==========================================================================
    def status(self) -> dict[str, Any]:
        """Memory, blocks, write acknowledgement times and how far each table's unflushed
        data lags."""
        now = time.monotonic()
        with self._lock:
            tables = list(self._tables.values())
        report = {}
        for t in tables:
            blocks = [b for g in list(t.groups.values()) for b in list(g.blocks)]
            unflushed = [b for b in blocks if b.flushed_instant is None]
            report[t.name] = {
                "buckets": sorted(t.owned),
                "file_groups": len(t.groups),
                "blocks": len(blocks),
                "resident_blocks": sum(1 for b in blocks if b.resident),
                "unflushed_blocks": len(unflushed),
                "unflushed_rows": sum(b.rows for b in unflushed),
                "unflushed_bytes": sum(b.nbytes for b in unflushed),
                "oldest_unflushed_s": max((now - b.created for b in unflushed), default=0.0),
                "memory_bytes": sum(b.memory for b in blocks),
                "acknowledged_rows": t.acknowledged.rows,
                "acknowledged_bytes": t.acknowledged.bytes,
            }
        return {
            "server_id": self.server_id,
            "life": self.life,
            "memory_used": self.memory.used,
            "memory_peak": self.memory.peak,
            "memory_budget": self.memory.budget,
            "wal": vars(self._committer.stats()),
            "writes": self.write_latency.summary(),
            "reads": self.read_latency.summary(),
            "wal_syncs": self._committer.sync_latency.summary(),
            "flushes": self.flush_latency.summary(),
            "gc_pauses": self.gc_pauses.summary(),
            "metrics_url": self.metrics_url,
            "tables": report,
        }

    def latencies(self) -> dict[str, LatencyWindow]:
        """The durations this server measures, by what they time."""
        return {"ack": self.write_latency, "read": self.read_latency, "wal_sync": self._committer.sync_latency,
                "flush": self.flush_latency, "gc": self.gc_pauses}

    def bucket_memory(self) -> dict[tuple[str, int], int]:
        """Bytes held per (table, bucket): what the master balances on."""
        held: dict[tuple[str, int], int] = {}
        for t, group, block in self._blocks():
            bucket = bucket_or_none(group.key.file_id)
            if bucket is not None:
                held[(t.name, bucket)] = held.get((t.name, bucket), 0) + block.memory
        return held

    def close(self) -> None:
        """Release every WAL file (open blocks stay in the WAL stream unsealed; a restart
        recovers them)."""
        self._closed = True
        self._retention.shutdown(wait=True)
        with self._lock:
            tables = list(self._tables.values())
        for t in tables:
            t.stream.close()
        self._committer.close()
        self.flusher.close()


def _round(
    ready: list[tuple[FileGroup, list[Block]]], limit: int
) -> tuple[list[tuple[FileGroup, list[Block]]], bool]:
    """The blocks of ``ready`` (each file group's, in order) one flush round takes, and
    whether ready blocks are left for another round: whole generations, oldest first,
    while their bytes fit ``limit`` (a round taking part of a generation reads its writes'
    records, which its other blocks select rows of too, again in the next), the first
    one whole up to twice ``limit`` (a generation is sealed once it holds ``limit``: the
    last write takes it past); of a larger one (writes large for the memory budget), its
    blocks while they fit, one at least."""
    sizes: dict[int, int] = {}
    for _, blocks in ready:
        for block in blocks:
            sizes[block.generation] = sizes.get(block.generation, 0) + block.nbytes
    if not sizes:
        return [], False
    first = min(sizes)
    if sizes[first] > 2 * limit:
        work, taken = [], 0
        for group, blocks in ready:
            chosen = []
            for block in itertools.takewhile(lambda b: b.generation == first, blocks):
                if taken and taken + block.nbytes > limit:
                    return work + ([(group, chosen)] if chosen else []), True
                chosen.append(block)
                taken += block.nbytes
            if chosen:
                work.append((group, chosen))
        return work, len(sizes) > 1
    through, taken, more = first, 0, False
    for generation in sorted(sizes):
        if taken and taken + sizes[generation] > limit:
            more = True
            break
        through, taken = generation, taken + sizes[generation]
    return [(g, chosen) for g, blocks in ready if (chosen := [b for b in blocks if b.generation <= through])], more


@contextlib.contextmanager
def _all_held(locks: Sequence[threading.Lock]) -> Iterator[None]:
    """Hold every lock of ``locks`` (taken in this order) for the block; one context for
    them all (an exit stack spent ~1.5 us a lock)."""
    taken = 0
    try:
        for lock in locks:
            lock.acquire()
            taken += 1
        yield
    finally:
        for lock in reversed(locks[:taken]):
            lock.release()


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


def _frames_of_keys(
    block: Block, pinned: Mapping[str, list[Any]], read_back: list[Frame] | None
) -> list[tuple[Frame, np.ndarray | None]]:
    """The block's durable frames a read filtered on ``pinned`` key values needs, with
    the rows holding them (None: the whole frame, to be filtered): through the block's
    key index when it is in memory, else every frame whose key range may hold them
    (``read_back``: its frames, read back from the WAL with other evicted blocks')."""
    found = block.key_frames(pinned) if pinned else None
    if found is not None:
        return [(frame, rows) for frame, rows in found]
    frames = block.frames() if read_back is None else read_back
    return [(f, None) for f in frames if all(f.may_hold(c, v) for c, v in pinned.items())]


def _read_up(frame: Frame, rows: np.ndarray | None, schema: pa.Schema) -> pa.RecordBatch:
    """The ``rows`` of a frame of a block written under an older schema, read up to
    ``schema``: the columns it lacks are null."""
    held = frame.source.schema.names
    return project(frame.rows_of([n for n in schema.names if n in held], rows), schema)


def _repeated(runs: list[tuple[str, int]]) -> pa.DictionaryArray:
    """A dictionary column repeating each value for its run of rows."""
    values = list(dict.fromkeys(v for v, _ in runs))
    index = {v: i for i, v in enumerate(values)}
    codes = np.repeat(
        np.array([index[v] for v, _ in runs], dtype=np.int32),
        np.array([n for _, n in runs], dtype=np.int64),
    )
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(values, pa.string()))
