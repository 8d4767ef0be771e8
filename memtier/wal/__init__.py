"""The write-ahead log: a group-committed stream of segments per table and table server.

* :mod:`~memtier.wal.format` - the versioned byte format (header, frames, seal, CRC32C);
* :mod:`~memtier.wal.storage` - one file, or one object per commit on object stores;
* :mod:`~memtier.wal.writer` - :class:`WalWriter` and the table server's :class:`GroupCommitter`;
* :mod:`~memtier.wal.stream` - :class:`WalStream`: every block of a table in one stream, one
  sync per group commit; frames read back by where they lie; recovery; segment retention;
* :mod:`~memtier.wal.replay` - crash recovery of a block file (:func:`recover`);
* :mod:`~memtier.wal.reader` - a block file's frames as Arrow (:func:`read_wal`);
* :mod:`~memtier.wal.retention` - which block files may be deleted.

Block files (one WAL per block) are what versions before the stream wrote, and what
:class:`WalWriter` writes on its own (tests); table servers still recover and retain them.
"""

from memtier.config import SyncPolicy, WalConfig
from memtier.wal.format import FORMAT_VERSION, WalContents, WalFrame, WalHeader, WalSeal
from memtier.wal.reader import read_header, read_seal, read_wal
from memtier.wal.replay import RecoveredWal, producer_high_water, recover
from memtier.wal.retention import BlockState, WalStatus, delete_expired, expired, list_status
from memtier.wal.storage import WalEntry, WalFileName, list_wals
from memtier.wal.stream import (
    FlushedSegment,
    FrameRef,
    QueuedFrames,
    RecoveredBlock,
    SegmentName,
    StreamFrame,
    WalStream,
    delete_segments,
    read_frames,
    read_stream,
    recover_blocks,
    retired,
    stale_segments,
    stream_directory,
)
from memtier.wal.writer import CommitStats, FrameLocation, GroupCommitter, PendingAppend, WalWriter

__all__ = [
    "FORMAT_VERSION",
    "BlockState",
    "CommitStats",
    "FlushedSegment",
    "FrameLocation",
    "FrameRef",
    "GroupCommitter",
    "PendingAppend",
    "QueuedFrames",
    "RecoveredBlock",
    "RecoveredWal",
    "SegmentName",
    "StreamFrame",
    "SyncPolicy",
    "WalConfig",
    "WalContents",
    "WalEntry",
    "WalFileName",
    "WalFrame",
    "WalHeader",
    "WalSeal",
    "WalStatus",
    "WalStream",
    "WalWriter",
    "delete_expired",
    "delete_segments",
    "expired",
    "list_status",
    "list_wals",
    "producer_high_water",
    "read_header",
    "read_seal",
    "read_frames",
    "read_stream",
    "read_wal",
    "recover",
    "recover_blocks",
    "retired",
    "stale_segments",
    "stream_directory",
]
