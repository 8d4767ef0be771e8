"""A table server's state, the buckets it owns and its memory: acquiring buckets (recovering
their unflushed blocks from the WAL first) and releasing them, the budget writes and flushes
take room from (sealed blocks evicted), sealing a table's blocks together, adopting a newer
schema, and dropping everything when the master fenced this server's life."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

from memtier.config import FlushWorker, TableServerConfig, WalConfig
from memtier.errors import FencedError, MemtierError, NotOwnerError, RpcError
from memtier.exchange import TxnSnapshot
from memtier.hudi.filenames import bucket_or_none
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.tablemeta import TableMeta
from memtier.io import FileIO, join, open_fileio, parent, relpath
from memtier.latency import LatencyWindow
from memtier.tableserver.block import Block
from memtier.tableserver.filegroup import FileGroup, FileGroupKey
from memtier.tableserver.flusher import Flusher, InlineFlusher, ProcessFlusher
from memtier.tableserver.master_link import MasterLink
from memtier.tableserver.memory import MemoryAccount
from memtier.tableserver.tables import ServedTable, all_held
from memtier.wal import (
    GroupCommitter,
    RecoveredBlock,
    WalHeader,
    WalStream,
    list_wals,
    recover_blocks,
    stream_directory,
)
from memtier.wal.fence import new_life
from memtier.wal.reserve import SpaceReserve
from memtier.wal.storage import WalEntry

log = logging.getLogger(__name__)

#: How long a write waiting for room sleeps before it looks again (a flush ending wakes it).
_ROOM_WAIT_S = 0.05


class ServerBase:
    """A table server's state, ownership of buckets and memory; thread-safe."""

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
        self._tables: dict[str, ServedTable] = {}
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
        self._reserve = SpaceReserve(self._wal_io, self._wal_root, self._wal_config.reserved_bytes)
        self._closed = False
        self._fenced: set[int] = set()  # transactions being resolved: their writes are refused
        self.flusher: Flusher = (
            ProcessFlusher(self.config.flush_timeout.total_seconds(), self._wal_io, cpus=flush_cpus)
            if self.config.flush_worker is FlushWorker.PROCESS else InlineFlusher(self._wal_io)
        )

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
            # a file group of these buckets found here was made by a write refused as they went
            # to another server (a release): it holds no block, and it would number blocks on
            # from what this server flushed then, ids the master records as flushed since
            for key in [k for k in t.groups if bucket_or_none(k.file_id) in wanted]:
                del t.groups[key]
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

    def _open_table(self, table: str) -> ServedTable:
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
                    reserve=self._reserve,
                )
                t = self._tables[table] = ServedTable(table, meta, stream, file_ids=file_ids)
            return t

    def _check_owned(self, t: ServedTable, buckets: set[int]) -> None:
        """:class:`NotOwnerError` unless this server still serves every one of ``buckets``."""
        foreign = sorted(buckets if t.gone else buckets - t.owned)
        if foreign:
            raise NotOwnerError(
                f"buckets {foreign} of table {t.name!r} are not on table server {self.server_id}; "
                "refresh the routing and retry"
            )

    def _table(self, table: str) -> ServedTable:
        if self._closed:
            raise RpcError(f"table server {self.server_id} is shut down")
        with self._lock:
            t = self._tables.get(table)
        if t is None:  # the master decides whether it exists; here it is just not served (yet)
            raise NotOwnerError(f"table {table!r} is not served by table server {self.server_id}")
        return t

    def _new_group(self, t: ServedTable, key: FileGroupKey) -> FileGroup:
        """A file group to hold blocks of ``key``, sharing the producers' sequence numbers
        with the other file groups of its bucket held here (:class:`ProducerMarks`)."""
        bucket = bucket_or_none(key.file_id)
        sibling = None if bucket is None else next(
            (g for k, g in list(t.groups.items()) if k.partition == key.partition and bucket_or_none(k.file_id) == bucket),
            None)
        return FileGroup(
            t.name, key, t.stored_schema, self._wal_io, self._committer,
            flushed_through=t.flushed.get(key, 0), clock=self._clock,
            marks=sibling.marks if sibling is not None else None,
        )

    def _refresh_schema(self, t: ServedTable) -> TableMeta:
        """Adopt the table's newest schema (from its timeline) if it is newer than the one
        this server writes: every open block is sealed (a block's rows keep the schema it
        was written under, in memory and in the WAL) and blocks opened from now on are
        of the newer one. The table as it is now written."""
        location = self._master.table_location(t.name)
        newest = TableMeta.load(open_fileio(location.path, location.storage_options), location.path)
        groups = sorted(list(t.groups.values()), key=lambda g: g.key)
        with all_held([g.lock for g in groups]):
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

    def _seal_generation(self, t: ServedTable, due: Callable[[], bool]) -> None:
        """Seal every open block of ``t`` together if ``due()`` still holds once every
        file group's lock is held (taken in key order, as appends take theirs); blocks
        opened from then on are of the next generation."""
        groups = sorted(list(t.groups.values()), key=lambda g: g.key)
        with all_held([g.lock for g in groups]):
            if not due():
                return
            for group in groups:
                group.seal_open()
            with t.generation_lock:
                t.generation += 1
                t.open_bytes = 0

    def _blocks(self) -> list[tuple[ServedTable, FileGroup, Block]]:
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

    @property
    def _block_max_bytes(self) -> int:
        """A table's open blocks are sealed (together) once they hold
        ``tableserver.block-max-bytes``, or a sixteenth of the memory budget when that is
        less, so one generation's flush (its blocks and their :data:`FLUSH_COPIES`) takes
        at most half the budget."""
        return max(1, min(self.config.block_max_bytes, self.config.memory_budget // 16))

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
            with all_held([g.lock for g in groups]):
                t.gone = True
                for group in groups:
                    for block in group.blocks:
                        self.memory.release(block.drop())
                t.groups.clear()
                t.owned.clear()
            with contextlib.suppress(MemtierError):  # fenced: its last sync may be refused
                t.stream.close()
