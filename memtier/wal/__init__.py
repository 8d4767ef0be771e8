"""The write-ahead log: one durable, group-committed WAL per in-memory block.

* :mod:`~memtier.wal.format` - the versioned byte format (header, frames, seal, CRC32C);
* :mod:`~memtier.wal.storage` - one file, or one object per commit on object stores;
* :mod:`~memtier.wal.writer` - :class:`WalWriter` and the table server's :class:`GroupCommitter`;
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
from memtier.wal.writer import CommitStats, FrameLocation, GroupCommitter, WalWriter

__all__ = [
    "FORMAT_VERSION",
    "BlockState",
    "CommitStats",
    "FrameLocation",
    "GroupCommitter",
    "RecoveredWal",
    "SyncPolicy",
    "WalConfig",
    "WalContents",
    "WalEntry",
    "WalFileName",
    "WalFrame",
    "WalHeader",
    "WalSeal",
    "WalStatus",
    "WalWriter",
    "delete_expired",
    "expired",
    "list_status",
    "list_wals",
    "producer_high_water",
    "read_header",
    "read_seal",
    "read_wal",
    "recover",
]
