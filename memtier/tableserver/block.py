"""A block: an append-only run of record batches of one file group, backed by one WAL.

Frames are appended to the WAL first (durable on return) and to memory second. A block
is *resident* while its frames are in memory; evicting it drops them, and they are read
back from the WAL when a reader or a flush needs them. Sealing closes the block for good.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from memtier.io import FileIO
from memtier.master.state import TxnSnapshot
from memtier.wal import GroupCommitter, WalHeader, WalWriter, read_wal
from memtier.wal.format import WalContents

__all__ = ["Block", "Frame"]


@dataclass(frozen=True)
class Frame:
    """One acknowledged write into a block."""

    txn_id: int
    producer_id: bytes
    producer_seq: int
    batch: pa.RecordBatch
    _ranges: dict[str, tuple[Any, Any]] = field(default_factory=dict, compare=False, repr=False)

    def value_range(self, column: str) -> tuple[Any, Any]:
        """(min, max) of ``column`` in this frame (None, None when all null); computed
        once, for reads that skip frames by key."""
        known = self._ranges.get(column)
        if known is None:
            bounds = pc.min_max(self.batch.column(column))
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
        path: str,
        fileio: FileIO,
        *,
        writer: WalWriter | None,
        frames: list[Frame] | None = None,
        sealed: bool = False,
    ) -> None:
        self.header = header
        self.path = path
        self._fileio = fileio
        self._writer = writer
        self._frames: list[Frame] | None = frames if frames is not None else []
        self._txns = {f.txn_id for f in self._frames}
        self.rows = sum(f.batch.num_rows for f in self._frames)
        self.nbytes = sum(f.batch.nbytes for f in self._frames)
        self.sealed = sealed
        self.flushed_instant: str | None = None  # the instant that wrote it to the table
        self.flushed_at: float | None = None  # monotonic time of that
        self.created = time.monotonic()
        self._lock = threading.Lock()

    @classmethod
    def create(
        cls, fileio: FileIO, path: str, header: WalHeader, committer: GroupCommitter
    ) -> Block:
        return cls(header, path, fileio, writer=WalWriter.create(fileio, path, header, committer))

    @classmethod
    def recovered(cls, fileio: FileIO, contents: WalContents) -> Block:
        """A block rebuilt from its recovered WAL (sealed: its writer is gone)."""
        frames = [
            Frame(f.txn_id, f.producer_id, f.producer_seq, f.batch) for f in contents.frames
        ]
        return cls(contents.header, contents.path, fileio, writer=None, frames=frames, sealed=True)

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
    def append(self, frame: Frame) -> int:
        """Durably append ``frame`` (WAL, then memory); returns the bytes it added."""
        assert self._writer is not None and not self.sealed
        self._writer.append(
            frame.batch,
            txn_id=frame.txn_id,
            producer_id=frame.producer_id,
            producer_seq=frame.producer_seq,
        )
        with self._lock:
            if self._frames is not None:
                self._frames.append(frame)
            self._txns.add(frame.txn_id)
            self.rows += frame.batch.num_rows
            self.nbytes += frame.batch.nbytes
        return frame.batch.nbytes

    @property
    def wal_size(self) -> int:
        return self._writer.size if self._writer is not None else 0

    def seal(self) -> None:
        """Close the block: a seal record ends its WAL; nothing more is appended."""
        if self.sealed:
            return
        self.sealed = True
        if self._writer is not None:
            self._writer.seal()
            self._writer.close()
            self._writer = None

    def close(self) -> None:
        """Release the WAL file without sealing (the block's server is going away)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def mark_flushed(self, instant: str) -> None:
        self.flushed_instant = instant
        self.flushed_at = time.monotonic()

    def missing_from(self, as_of_instant: str | None) -> bool:
        """Whether a reader of the Hudi table as of ``as_of_instant`` (None: a table with
        no commits yet) lacks this block's rows."""
        return (
            self.flushed_instant is None
            or as_of_instant is None
            or self.flushed_instant > as_of_instant
        )

    # -- reading ----------------------------------------------------------------------
    def evict(self) -> int:
        """Drop the frames from memory (they stay in the WAL); returns the bytes freed."""
        with self._lock:
            if self._frames is None or not self.sealed:
                return 0
            self._frames = None
            return self.nbytes

    def frames(self) -> list[Frame]:
        """Every frame, from memory or (evicted) from the WAL."""
        with self._lock:
            if self._frames is not None:
                return list(self._frames)
        contents = read_wal(self._fileio, self.path)
        return [Frame(f.txn_id, f.producer_id, f.producer_seq, f.batch) for f in contents.frames]

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
