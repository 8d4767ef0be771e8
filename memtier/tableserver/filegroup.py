"""One file group on a table server: its blocks in order, the open one, and the highest
producer sequence seen per producer (so a retried write is dropped, not applied twice)."""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from memtier.errors import SchemaEvolutionError
from memtier.hudi.deletes import DELETE_FLAG, flagged_schema
from memtier.hudi.evolution import changes
from memtier.hudi.filenames import bucket_or_none
from memtier.io import FileIO
from memtier.tableserver.block import Block, Frame
from memtier.wal import GroupCommitter, RecoveredBlock, WalHeader, WalWriter, recover
from memtier.wal.format import check_schema
from memtier.wal.storage import WalEntry

__all__ = ["FileGroup", "FileGroupKey", "ProducerMarks", "in_write_order"]


def _unflagged(schema: pa.Schema) -> pa.Schema:
    return schema.remove(schema.get_field_index(DELETE_FLAG)) if DELETE_FLAG in schema.names else schema


@dataclass(frozen=True, order=True)
class FileGroupKey:
    """A file group of a table: its partition path and Hudi file id (bucket inside)."""

    partition: str
    file_id: str


class ProducerMarks:
    """Per producer, the highest sequence number a bucket's file groups on this server
    hold, and the frame that last raised it while its append may still fail; thread-safe.
    Shared by the bucket's file groups (a clustering replaced one while it held blocks; a
    bucket moved here recovers the file group the server before wrote to, which need not
    be the one this server writes to): a retry is dropped whichever of them holds it."""

    def __init__(self) -> None:
        self.high_water: dict[bytes, int] = {}
        self._raised: dict[bytes, tuple[Frame, int]] = {}
        self._lock = threading.Lock()

    def see(self, producer_seqs: Mapping[bytes, int]) -> None:
        """Sequence numbers held durably (recovered from the WAL)."""
        with self._lock:
            for producer, seq in producer_seqs.items():
                self.high_water[producer] = max(self.high_water.get(producer, -1), seq)

    def is_duplicate(self, producer: bytes, seq: int) -> bool:
        """Whether write ``seq`` of ``producer`` is held: durable, or queued by a write
        still waiting for its sync (:meth:`in_flight`), not one whose append failed."""
        with self._lock:
            high = self.high_water.get(producer, -1)
            raised = self._raised.get(producer)
        if raised is not None and raised[0].failed() and high == raised[0].producer_seq:
            high = raised[1]  # (its writer has not taken it back yet: :meth:`unsee`)
        return seq <= high

    def in_flight(self, producer: bytes) -> Frame | None:
        """The frame of ``producer`` whose append may still fail, if any: a retry taken
        for held is acknowledged only once that frame is durable."""
        with self._lock:
            raised = self._raised.get(producer)
        return raised[0] if raised is not None and raised[0].ack is not None else None

    def added(self, frame: Frame) -> int:
        """``frame`` was queued: its producer's sequence number seen before it."""
        with self._lock:
            before = self.high_water.get(frame.producer_id, -1)
            if frame.producer_seq > before:
                self.high_water[frame.producer_id] = frame.producer_seq
                self._raised[frame.producer_id] = (frame, before)
            return before

    def confirmed(self, frame: Frame) -> None:
        """``frame``'s append is durable: no retry of it waits for it any more."""
        with self._lock:
            if self._raised.get(frame.producer_id, (None,))[0] is frame:
                del self._raised[frame.producer_id]

    def unsee(self, frame: Frame, before: int) -> None:
        """``frame``'s append failed: its producer may send it again."""
        with self._lock:
            if self.high_water.get(frame.producer_id) == frame.producer_seq:
                self.high_water[frame.producer_id] = before
            if self._raised.get(frame.producer_id, (None,))[0] is frame:
                del self._raised[frame.producer_id]


class FileGroup:
    """Blocks of one file group, oldest first. Appends are serialized per file group so
    the order in memory is the order in the WAL."""

    def __init__(
        self,
        table: str,
        key: FileGroupKey,
        schema: pa.Schema,
        fileio: FileIO,
        committer: GroupCommitter,
        *,
        flushed_through: int = 0,
        clock: Callable[[], float] = time.time,
        marks: ProducerMarks | None = None,
    ) -> None:
        """``marks``: those of the bucket's other file groups here, if any (shared)."""
        self.table = table
        self.key = key
        self.schema = schema
        self._fileio = fileio
        self._committer = committer  # seals version-1 block files left unsealed
        self._clock = clock
        self.blocks: list[Block] = []
        self.marks = marks if marks is not None else ProducerMarks()
        #: Block ids go on after the last one in the Hudi table (its blocks may be gone
        #: from the WAL): a block id is never given twice in a file group.
        self.next_block_id = flushed_through + 1
        self.lock = threading.Lock()  # one appender at a time: WAL order == memory order

    # -- recovery ---------------------------------------------------------------------
    def recover(
        self, entries: list[WalEntry], streamed: list[RecoveredBlock], flushed_through: int
    ) -> list[Block]:
        """Rebuild from this file group's block files of older versions (torn tails cut,
        unsealed version-1 ones sealed) and its blocks found in the WAL stream (those with
        a block file are read from that; of blocks up to ``flushed_through``, already in
        the Hudi table, only the producer sequence numbers count); returns the unflushed
        ones, oldest first."""
        blocks: dict[int, Block] = {}
        for entry in entries:
            recovered = recover(self._fileio, entry.path)
            self._check(recovered.contents.header, entry.path)
            if not recovered.contents.sealed:  # its writer is gone: close the block on disk too
                WalWriter.resume(self._fileio, recovered.contents, self._committer).seal()
            blocks[entry.name.block_id] = Block.from_block_file(self._fileio, recovered.contents)
            self.marks.see(recovered.producer_seqs)
        for found in streamed:
            self.marks.see(found.producer_seqs)
            if found.header.block_id not in blocks and found.header.block_id > flushed_through:
                self._check(found.header, f"the WAL stream of {self.table}")
                blocks[found.header.block_id] = Block.from_stream(
                    self._fileio, found.header, found.frames, found.refs
                )
        unflushed = []
        for block_id in sorted(blocks):
            block = blocks[block_id]
            self.next_block_id = max(self.next_block_id, block_id + 1)
            if block_id <= flushed_through:
                block.evict()
                block.mark_flushed("00000000000000000")  # before any reader's instant
            else:
                block.generation = len(unflushed)  # the k-th of each file group: sealed together
                unflushed.append(block)
            self.blocks.append(block)
        self.next_block_id = max(self.next_block_id, flushed_through + 1)
        return unflushed

    def _check(self, header: WalHeader, where: str) -> None:
        """A block's rows are read up to the table's schema: its own must be that schema
        or an older one of the table."""
        try:
            changes(_unflagged(header.schema), _unflagged(self.schema))
        except SchemaEvolutionError:
            check_schema(self.schema, flagged_schema(header.schema), f"the schema of WAL {where}",
                         "the table's schema (or an older one of it)")

    # -- writing ----------------------------------------------------------------------
    def is_duplicate(self, producer: bytes, seq: int) -> bool:
        """Whether write ``seq`` of ``producer`` is held by the bucket (:class:`ProducerMarks`)."""
        return self.marks.is_duplicate(producer, seq)

    def in_flight(self, producer: bytes) -> Frame | None:
        return self.marks.in_flight(producer)

    def open_block(self, generation: int) -> Block:
        """The block new frames go to (started, of ``generation``, when there is none open,
        or the open one is of another schema: sealed then)."""
        if self.blocks and not self.blocks[-1].sealed:
            if self.blocks[-1].header.schema.equals(self.schema):
                return self.blocks[-1]
            self.blocks[-1].seal()
        header = WalHeader(
            table=self.table,
            partition=self.key.partition,
            file_group=self.key.file_id,
            block_id=self.next_block_id,
            schema=self.schema,
            created_ms=int(self._clock() * 1000),
        )
        block = Block(header, self._fileio)
        block.generation = generation
        self.next_block_id += 1
        self.blocks.append(block)
        return block

    def add(self, block: Block, frame: Frame, nbytes: int) -> int:
        """Add ``frame``, queued on the WAL stream for ``block`` (the open block) already,
        to memory; the producer's sequence number seen before it (for :meth:`unsee`). The
        caller holds :attr:`lock` from before the frame was queued."""
        block.add(frame, nbytes)
        return self.marks.added(frame)

    def confirmed(self, frame: Frame) -> None:
        """``frame``'s append is durable: no retry of it waits for it any more."""
        self.marks.confirmed(frame)

    def unsee(self, frame: Frame, before: int) -> None:
        """``frame``'s append failed (it never became durable, and reads and flushes skip
        it): its producer may send it again, which must not be dropped as a retry of what
        is held."""
        self.marks.unsee(frame, before)

    # -- lifecycle --------------------------------------------------------------------
    def unflushed(self) -> list[Block]:
        return [b for b in self.blocks if b.flushed_instant is None]

    def seal_open(self) -> None:
        if self.blocks and not self.blocks[-1].sealed:
            self.blocks[-1].seal()

    def forget_flushed(self, older_than: float) -> int:
        """Drop blocks flushed before monotonic time ``older_than`` (readers planned
        before their flush are done by then); their WAL files remain for retention.
        Returns the memory they held."""
        keep, freed = [], 0
        for block in self.blocks:
            if block.flushed_at is not None and block.flushed_at < older_than:
                freed += block.evict()
            else:
                keep.append(block)
        self.blocks = keep
        return freed


def in_write_order(work: list[tuple[FileGroup, list[Block]]]) -> list[tuple[FileGroup, list[Block]]]:
    """``work`` with the blocks of each bucket's file groups in the order they were
    written: file groups of one bucket (a clustering replaced one while blocks of it were
    held, here or by a server before; a bucket moved here whose blocks a server before
    wrote to another) flush into one file group as one change, and are read as one, their
    rows in the order of these pieces, which must be write order (a delete in commit
    order would undo a later write otherwise), not the order this server came to hold the
    file groups in (after a recovery from the WAL: any). Each file group's blocks keep
    their order; a bucket's file groups interleave by when their blocks were opened."""
    by_bucket: dict[tuple[str, int | None], list[list[tuple[FileGroup, Block]]]] = {}
    for group, blocks in work:
        bucket = (group.key.partition, bucket_or_none(group.key.file_id))
        by_bucket.setdefault(bucket, []).append([(group, b) for b in blocks])
    ordered: list[tuple[FileGroup, list[Block]]] = []
    for runs in by_bucket.values():
        for group, block in heapq.merge(*runs, key=lambda item: item[1].header.created_ms):
            if ordered and ordered[-1][0] is group:
                ordered[-1][1].append(block)
            else:
                ordered.append((group, [block]))
    return ordered
