"""A block: an append-only run of record batches of one file group.

Frames are queued on the table's WAL stream (one sync shared with the other file groups'
frames of the write, and with concurrent writes) and added to memory in the same order;
reads see a frame once its append is durable. Sealing closes the block for good; a sealed
block may be *evicted*: its frames are dropped from memory and read back from where they
lie in the stream's segments when a reader or a flush needs them. A block of an older
version recovered from its own block file is read back from that file.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memtier.exchange import TxnSnapshot
from memtier.hudi.deletes import DELETE_FLAG, flagged_schema
from memtier.hudi.rows import take_rows
from memtier.io import FileIO
from memtier.tableserver.flush import FramePlaces, PlaceLog
from memtier.tableserver.keyindex import KeyIndex
from memtier.wal import FrameRef, PendingAppend, WalFrame, WalHeader, read_frames, read_wal
from memtier.wal.format import WalContents

__all__ = ["Block", "Frame", "Share", "frames_of"]


class Share:
    """The memory of one write's rows: the batch as it came, each file group's rows a
    slice or a selection of it (one copy instead of one per file group). The batch is
    freed when the last block holding part of it drops it, so that is when its bytes
    count as freed."""

    __slots__ = ("_left", "_lock", "nbytes")

    def __init__(self, nbytes: int, slices: int) -> None:
        self.nbytes = nbytes
        self._left = slices
        self._lock = threading.Lock()

    def drop(self) -> int:
        """One slice dropped: the bytes freed (all of them with the last slice, else 0)."""
        with self._lock:
            self._left -= 1
            return self.nbytes if self._left == 0 else 0


@dataclass
class Frame:
    """One acknowledged write into a block: the rows of ``source`` at ``positions``
    (ascending; None: all of them)."""

    txn_id: int
    producer_id: bytes
    producer_seq: int
    source: pa.RecordBatch
    positions: np.ndarray | None = field(default=None, compare=False, repr=False)
    #: The stream append making it durable, while that may still be running; None once
    #: it is known durable (:meth:`Block.confirm`).
    ack: PendingAppend | None = field(default=None, compare=False, repr=False)
    #: The write's memory this frame's batch is a slice of (None: the batch owns its memory).
    share: Share | None = field(default=None, compare=False, repr=False)
    #: Where its record lies in the WAL stream (None: in the block's own block file).
    ref: FrameRef | None = field(default=None, compare=False, repr=False)
    _ranges: dict[str, tuple[Any, Any]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def num_rows(self) -> int:
        return self.source.num_rows if self.positions is None else len(self.positions)

    @property
    def batch(self) -> pa.RecordBatch:
        """The frame's rows (taken from the write's batch when a selection of it)."""
        return self.source if self.positions is None else take_rows(self.source, self.positions)

    def column(self, name: str) -> pa.Array:
        """One column of the frame's rows."""
        column = self.source.column(name)
        return column if self.positions is None else take_rows(column, self.positions)

    def rows_of(self, names: list[str], rows: np.ndarray | None) -> pa.RecordBatch:
        """The frame's ``rows`` (ascending positions among its rows; None: all) of the
        columns ``names``: one take of the write's batch when a selection of it."""
        source = self.source.select(names)
        if self.positions is None:
            return _rows_of(source, rows)
        return take_rows(source, self.positions if rows is None else self.positions[rows])

    def durable(self) -> bool:
        """Whether its append became durable (waiting for it if still running)."""
        ack = self.ack  # (read once: :meth:`Block.confirm` may clear it meanwhile)
        return ack is None or ack.durable()

    def failed(self) -> bool:
        """Whether its append is known to have failed (no waiting)."""
        ack = self.ack
        return ack is not None and ack.failed()

    def value_range(self, column: str) -> tuple[Any, Any]:
        """(min, max) of ``column`` in this frame (None, None when all null); computed
        once, for reads that skip frames by key."""
        known = self._ranges.get(column)
        if known is None:
            bounds = pc.min_max(self.column(column))
            known = self._ranges[column] = (bounds["min"].as_py(), bounds["max"].as_py())
        return known

    def may_hold(self, column: str, values: Collection[Any]) -> bool:
        """False only when no value of ``values`` can be in ``column`` of this frame."""
        low, high = self.value_range(column)
        if low is None:
            return False
        try:
            return any(low <= v <= high for v in values)
        except TypeError:  # values of another type: the filter itself decides
            return True


class Block:
    """One block of one file group; thread-safe."""

    def __init__(
        self,
        header: WalHeader,
        fileio: FileIO,
        *,
        frames: list[Frame] | None = None,
        sealed: bool = False,
        path: str | None = None,
    ) -> None:
        self.header = header
        self.path = path  # the block file of a block of an older version, else None
        self._fileio = fileio
        self._frames: list[Frame] | None = frames if frames is not None else []
        #: While evicted: each frame's transaction, rows and place in the WAL stream.
        self._evicted: list[tuple[int, int, FrameRef]] | None = None
        self._index = KeyIndex(header.schema)  # key columns of the frames, built as reads ask
        self._places = PlaceLog()
        for frame in self._frames:
            if frame.ref is not None:
                self._places.add(frame.ref)
        self._unconfirmed = sum(1 for f in self._frames if f.ack is not None)  # appends maybe still syncing
        self._txns = {f.txn_id for f in self._frames}
        self.rows = sum(f.num_rows for f in self._frames)
        self.nbytes = sum(f.source.nbytes for f in self._frames)  # (frames read back own their rows)
        self.sealed = sealed
        self.flushed_instant: str | None = None  # the instant that wrote it to the table
        self.flushed_at: float | None = None  # monotonic time of that
        self.pinned = False  # a flush is reading it: not evicted meanwhile
        #: Blocks of a table's file groups sealed together share a generation (a flush
        #: round takes whole generations: they hold rows of the same writes).
        self.generation = 0
        self.created = time.monotonic()
        self._lock = threading.Lock()

    @classmethod
    def from_block_file(cls, fileio: FileIO, contents: WalContents) -> Block:
        """A block rebuilt from its own block file (sealed)."""
        frames = [_frame(f) for f in contents.frames]
        return cls(contents.header, fileio, frames=frames, sealed=True, path=contents.path)

    @classmethod
    def from_stream(cls, fileio: FileIO, header: WalHeader, frames: list[WalFrame],
                    refs: list[FrameRef]) -> Block:
        """A block recovered from the WAL stream's segments (sealed: its writer is gone)."""
        held = [_frame(f, ref) for f, ref in zip(frames, refs, strict=True)]
        return cls(header, fileio, frames=held, sealed=True)

    @property
    def block_id(self) -> int:
        return self.header.block_id

    @property
    def resident(self) -> bool:
        return self._frames is not None

    @property
    def memory(self) -> int:
        """Bytes this block holds in memory."""
        return self.nbytes if self.resident else 0

    # -- writing ----------------------------------------------------------------------
    def add(self, frame: Frame, nbytes: int) -> None:
        """Add ``frame``, queued on the stream already (in the order of these calls), to
        memory, counting ``nbytes`` for it. Reads see it once its append is durable."""
        assert frame.ref is not None and not self.sealed
        with self._lock:
            if self._frames is not None:
                self._frames.append(frame)
            self._places.add(frame.ref)
            self._unconfirmed += frame.ack is not None
            self._txns.add(frame.txn_id)
            self.rows += frame.num_rows
            self.nbytes += nbytes

    def seal(self) -> None:
        """Close the block: nothing more is appended."""
        self.sealed = True

    def confirm(self, frame: Frame) -> None:
        """``frame``'s append is durable: it forgets the append, and once every frame's
        is forgotten a flush lists the block's frames without asking each."""
        with self._lock:
            if frame.ack is not None:
                frame.ack = None
                self._unconfirmed -= 1

    def settle(self) -> bool:
        """Wait until every frame's append finished; whether all became durable."""
        with self._lock:
            frames = [] if self._frames is None else list(self._frames)
        return all(f.durable() for f in frames)

    def mark_flushed(self, instant: str) -> None:
        self.flushed_instant = instant
        self.flushed_at = time.monotonic()

    def missing_from(self, as_of_instant: str | None, pending: Collection[str] = ()) -> bool:
        """Whether a reader of the Hudi table as of ``as_of_instant`` (None: a table with
        no commits yet) lacks this block's rows: it was not flushed by then, or by an
        instant the reader saw ``pending`` (one that completed after a later one did)."""
        return (
            self.flushed_instant is None
            or as_of_instant is None
            or self.flushed_instant > as_of_instant
            or self.flushed_instant in pending
        )

    # -- reading ----------------------------------------------------------------------
    def evict(self) -> int:
        """Drop the frames of a sealed block from memory (they stay in the WAL, waited
        for if still syncing); returns the bytes freed (none when a frame never became
        durable: then only memory holds it)."""
        with self._lock:
            frames = self._frames
        if frames is None or not self.sealed or not self.settle():
            return 0  # a frame that never became durable: the block stays in memory
        if self.path is None:
            self._evicted = [(f.txn_id, f.num_rows, f.ref) for f in frames]  # type: ignore[misc]
        return self.drop()

    def drop(self) -> int:
        """Drop the frames from memory, whether the block file exists or not (the block
        is given up: its rows stay in the WAL for whoever recovers it); the bytes freed:
        its own, or those of the writes whose last slices it held (:class:`Share`)."""
        with self._lock:
            frames, self._frames = self._frames, None
            self._index = KeyIndex(self.header.schema)
        if frames is None:
            return 0
        shares = [f.share for f in frames if f.share is not None]
        return sum(s.drop() for s in shares) if shares else self.nbytes

    def frames(self) -> list[Frame]:
        """Every durable frame (waiting for appends still syncing), from memory or
        (evicted) from the WAL."""
        return frames_of([self])[0]

    def _held(self) -> tuple[list[Frame] | None, list[FrameRef]]:
        """Its frames in memory (None: evicted), and where the frames of an evicted block
        lie in the WAL stream (none for a block with its own block file)."""
        with self._lock:
            if self._frames is not None:
                return list(self._frames), []
            if self.path is not None:
                return None, []
            assert self._evicted is not None, "a dropped block has no frames to read back"
            return None, [ref for _, _, ref in self._evicted]

    def wal_frames(self, keep: Callable[[int], bool]) -> tuple[FramePlaces, int] | None:
        """Where each durable frame whose transaction ``keep`` takes lies in the WAL stream,
        in order, and their row count, without reading a frame back; None for a block of
        an older version (its own block file holds its frames)."""
        if self.path is not None:
            return None
        with self._lock:
            # (a round holds tens of thousands of frames, and this runs under the
            # interpreter lock that acknowledges writes: when every append is confirmed
            # and every transaction kept, the places are taken whole, no frame visited)
            held = self._frames if self._frames is not None else self._evicted
            assert held is not None, "a dropped block has no frames"
            if not self._unconfirmed and all(keep(t) for t in self._txns):
                return self._places.first(len(held)), self.rows
            frames = None if self._frames is None else list(self._frames)
            evicted = self._evicted
        if frames is None:
            assert evicted is not None
            kept = [(rows, ref) for txn, rows, ref in evicted if keep(txn)]
            return FramePlaces.of([ref for _, ref in kept]), sum(rows for rows, _ in kept)
        taken = [f for f in frames if f.durable() and keep(f.txn_id)]
        refs = [f.ref for f in taken if f.ref is not None]
        assert len(refs) == len(taken), "a durable frame of the stream knows where it lies"
        return FramePlaces.of(refs), sum(f.num_rows for f in taken)

    def key_frames(self, pinned: Mapping[str, list[Any]]) -> list[tuple[Frame, np.ndarray]] | None:
        """The durable frames holding a pinned value in every pinned column, each with
        those rows (in order), found through the block's :class:`KeyIndex`; None when
        the block is evicted or a value does not fit its column (use :meth:`frames`)."""
        with self._lock:  # frames are only appended: the list and its length, not a copy
            frames, index = self._frames, self._index
            count = 0 if frames is None else len(frames)
        if frames is None:
            return None
        hits = index.rows(frames, count, pinned)
        if hits is None:
            return None
        return [(frames[i], rows) for i, rows in sorted(hits.items()) if frames[i].durable()]

    def reload(self) -> int:
        """Bring an evicted block back into memory; returns the bytes it now holds."""
        frames = self.frames()
        with self._lock:
            if self._frames is None:
                self._frames = frames
                return self.nbytes
            return 0

    def resolved(self, snapshot: TxnSnapshot) -> bool:
        """Every transaction in the block is committed or aborted (it may flush)."""
        with self._lock:
            return all(snapshot.resolved(t) for t in self._txns)


def frames_of(blocks: list[Block]) -> list[list[Frame]]:
    """Each block's durable frames (:meth:`Block.frames`), those of evicted blocks read
    back from the WAL stream in one pass per schema: a write's frames for several blocks
    lie in one record there, read once for all of them."""
    held = [b._held() for b in blocks]
    by_schema: dict[pa.Schema, list[FrameRef]] = {}
    for block, (_, refs) in zip(blocks, held, strict=True):
        by_schema.setdefault(block.header.schema, []).extend(refs)
    read = {
        schema: iter(read_frames(blocks[0]._fileio, refs, schema)) for schema, refs in by_schema.items() if refs
    }
    found = []
    for block, (frames, refs) in zip(blocks, held, strict=True):
        if frames is not None:
            found.append([f for f in frames if f.durable()])
        elif block.path is not None:  # a block of an older version: its own block file
            found.append([_frame(f) for f in read_wal(block._fileio, block.path).frames])
        else:
            found.append([_frame(next(read[block.header.schema]), ref) for ref in refs])
    return found


def _rows_of(batch: pa.RecordBatch, rows: np.ndarray | None) -> pa.RecordBatch:
    """``batch``'s ``rows`` (ascending; None: all): a slice when they are one run (a
    lookup's key is one row of a frame: ~1 us, where a take is ~15), else a take."""
    if rows is None or len(rows) == batch.num_rows:
        return batch
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
        return batch.slice(int(rows[0]), len(rows))
    return batch.take(pa.array(rows))


def _frame(f: WalFrame, ref: FrameRef | None = None) -> Frame:
    """A frame read from a WAL, its batch with the delete flag (WAL files written before
    deletes existed have none: their rows are upserts)."""
    batch = f.batch
    if DELETE_FLAG not in batch.schema.names:
        batch = pa.RecordBatch.from_arrays(
            [*batch.columns, pa.array(np.zeros(batch.num_rows, dtype=bool))],
            schema=flagged_schema(batch.schema),
        )
    return Frame(f.txn_id, f.producer_id, f.producer_seq, batch, ref=ref)
