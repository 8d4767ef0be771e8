"""Flushes of a table server: sealed blocks of resolved transactions flushed into Hudi files
in rounds through its flush worker and committed through the master, periodic maintenance,
and the retention of WAL segments."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable

import pyarrow as pa

from memtier import failpoints
from memtier.config import FlushWorker
from memtier.errors import FencedError, NotOwnerError
from memtier.exchange import FlushedBlock, TxnSnapshot
from memtier.hudi.evolution import project
from memtier.hudi.filenames import bucket_or_none
from memtier.hudi.fsview import pending_clustering
from memtier.hudi.tablemeta import TableMeta
from memtier.io import join, parent, relpath, sweep_temp_files
from memtier.tableserver.base import ServerBase
from memtier.tableserver.block import Block
from memtier.tableserver.filegroup import FileGroup, FileGroupKey, in_write_order
from memtier.tableserver.flush import FlushGroup, FlushRows, FramePlaces, Planned, WalRows
from memtier.tableserver.tables import ServedTable
from memtier.wal import WalHeader, WalStream, delete_expired, stale_segments, stream_directory
from memtier.wal.storage import WalEntry

log = logging.getLogger(__name__)

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


class Flushes(ServerBase):
    """Flushes and WAL retention of a :class:`~memtier.tableserver.server.TableServer`."""

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
            def aged(t: ServedTable = t) -> bool:
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
        return elapsed >= _RETENTION_EVERY_S or elapsed >= _RETENTION_SOON_S and (
            any(s.closed_bytes() > self._wal_config.retention_bytes for s in streams) or self._reserve.low()
        )

    def _sweep_wal(self) -> None:
        try:
            self.delete_expired_wals()
        except Exception:
            log.exception("%s: deleting expired WAL failed; tried again in a minute", self.server_id)

    def delete_expired_wals(self) -> int:
        """Delete what the WAL holds of blocks flushed into the Hudi table (never a block
        that is not): stream segments whose every block is, closed longer ago than the
        retention period or the oldest beyond the retention bytes (none kept while the WAL's
        file system runs low: :mod:`memtier.wal.reserve`) (:func:`retired`; this
        server's and those earlier or other servers' incarnations left in the table's
        stream directory); block files of older versions past the retention period; and
        temporary files crashes left (:func:`~memtier.io.sweep_temp_files`). How many
        files were deleted."""
        deleted = 0
        with self._lock:
            tables = list(self._tables.values())
        now, retention = self._clock(), self._wal_config.retention.total_seconds()
        kept = self._wal_config.retention_bytes
        if self._reserve.low():  # flushed segments are kept for convenience: room comes first
            retention, kept = 0.0, 0
        for t in tables:
            wal_dir = join(self._wal_root, t.name)
            flushed = {(f.partition, f.file_id): f.block_id for f in self._master.flushed_blocks(t.name)}

            def is_flushed(h: WalHeader, flushed: dict[tuple[str, str], int] = flushed) -> bool:
                return h.block_id <= flushed.get((h.partition, h.file_group), 0)

            def file_flushed(entry: WalEntry, t: ServedTable = t, wal_dir: str = wal_dir) -> bool:
                if bucket_or_none(entry.name.file_group) not in t.owned:
                    return False  # another server's file group: its owner decides
                key = FileGroupKey(relpath(wal_dir, parent(entry.path)), entry.name.file_group)
                return entry.name.block_id <= t.flushed.get(key, 0)

            stale = stale_segments(  # unmodified for two segment ages: no writer appends to them
                self._wal_io, stream_directory(self._wal_root, t.name), keep_incarnation=t.stream.incarnation,
                is_flushed=is_flushed, now=now, min_age_s=2 * self._wal_config.segment_age.total_seconds(),
            )
            deleted += t.stream.delete_flushed(
                is_flushed, retention_s=retention, retention_bytes=kept, now=now,
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
    def _flush_round_bytes(self) -> int:
        """The most block bytes one flush commit takes (one generation at least): evicted
        blocks are read back from their WAL to be flushed, and the flush copies the rows
        (:data:`FLUSH_COPIES`), so a backlog is flushed in rounds that fit in memory."""
        return self._block_max_bytes

    def _flush_table(self, t: ServedTable) -> tuple[str | None, bool]:
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
            work = in_write_order(work)
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
        self, t: ServedTable, meta: TableMeta, group: FileGroup, blocks: list[Block], snapshot: TxnSnapshot
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
        self, t: ServedTable, meta: TableMeta, work: list[tuple[FlushGroup, FlushRows]], flushed: list[FlushedBlock],
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
