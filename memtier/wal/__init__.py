"""The write-ahead log: a group-committed stream per table server, a file per sealed block.

* :mod:`~memtier.wal.format` - the versioned byte format (header, frames, seal, CRC32C);
* :mod:`~memtier.wal.storage` - one file, or one object per commit on object stores;
* :mod:`~memtier.wal.writer` - :class:`WalWriter` and the table server's :class:`GroupCommitter`;
* :mod:`~memtier.wal.stream` - :class:`WalStream`: every block of a table in one stream, one
  sync per group commit; block files written whole at seal; recovery of unsealed blocks;
* :mod:`~memtier.wal.replay` - crash recovery (:func:`recover`);
* :mod:`~memtier.wal.reader` - frames as Arrow for the read path (:func:`read_wal`);
* :mod:`~memtier.wal.retention` - which WAL files may be deleted.
"""

from memtier.config import SyncPolicy, WalConfig
from memtier.wal.format import FORMAT_VERSION, WalContents, WalFrame, WalHeader, WalSeal
from memtier.wal.reader import read_header, read_seal, read_wal
from memtier.wal.replay import RecoveredWal, producer_high_water, recover
from memtier.wal.retention import BlockState, WalStatus, delete_expired, expired, list_status
from memtier.wal.storage import WalEntry, WalFileName, list_wals
from memtier.wal.stream import (
    SegmentName,
    StreamFrame,
    WalStream,
    delete_stale_segments,
    read_stream,
    recover_blocks,
    write_block_file,
)
from memtier.wal.writer import CommitStats, FrameLocation, GroupCommitter, PendingAppend, WalWriter

__all__ = [
    "FORMAT_VERSION",
    "BlockState",
    "CommitStats",
    "FrameLocation",
    "GroupCommitter",
    "PendingAppend",
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
    "delete_stale_segments",
    "expired",
    "list_status",
    "list_wals",
    "producer_high_water",
    "read_header",
    "read_seal",
    "read_stream",
    "read_wal",
    "recover",
    "recover_blocks",
    "write_block_file",
]
