"""The free space a table server's WAL leaves on its file system, so that a full disk
never blocks what frees it.

When the WAL's file system fills up with the WAL itself (flushes stalled while a table
server was dead or the master away), the master must still fence the dead server's WAL
streams (two small files in the stream directory: :mod:`memtier.wal.fence`) before another
server can recover its buckets, flush them, and so delete the segments that fill the disk.
A table server therefore refuses a write (:class:`~memtier.errors.WalWriteFailedError`,
as on a full disk) that would leave less than ``wal.reserved-bytes`` free, as Kudu keeps
``fs_wal_dir_reserved_bytes``; the master's fences, and the flushes' own bookkeeping, use
the reserve. A file system another program fills up is not protected: writes and fences
resume once space is freed there. Stores that do not report free space (HDFS, object
stores) keep no reserve.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from memtier.errors import WalWriteFailedError
from memtier.io import FileIO

__all__ = ["SpaceReserve"]

#: How long a measure of free space is trusted (less the bytes written since) while at
#: least :data:`ROOMY` times the reserve is free: one statvfs per write costs ~8 us.
TRUSTED_S = 0.05
ROOMY = 4


class SpaceReserve:
    """The reserve of one WAL directory's file system; thread-safe."""

    def __init__(self, fileio: FileIO, directory: str, reserved: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._fileio = fileio
        self._directory = directory
        self.reserved = reserved
        self._clock = clock
        self._lock = threading.Lock()
        self._measured: tuple[float, int] | None = None  # (when, bytes free then)
        self._spent = 0  # bytes written since

    def free(self) -> int | None:
        """Bytes free for the WAL on its file system now (None: the store does not say, or
        no reserve is kept)."""
        if not self.reserved:
            return None
        free = self._fileio.free_bytes(self._directory)
        if free is not None:
            with self._lock:
                self._measured, self._spent = (self._clock(), free), 0
        return free

    def low(self) -> bool:
        """Whether less than twice the reserve is free: time to drop retained segments."""
        free = self.free()
        return free is not None and free < 2 * self.reserved

    def check(self, incoming: int, table: str) -> None:
        """:class:`WalWriteFailedError` if writing ``incoming`` bytes to the WAL of
        ``table`` would leave less than the reserve free; else they count as written."""
        if not self.reserved:
            return
        with self._lock:
            measured, spent = self._measured, self._spent
        if measured is not None and self._clock() - measured[0] < TRUSTED_S and (
                measured[1] - spent - incoming >= ROOMY * self.reserved):
            free: int | None = measured[1] - spent
        else:
            free = self.free()
        if free is None:
            return
        if free - incoming < self.reserved:
            raise WalWriteFailedError(
                f"{self._directory}: no space left for the WAL of table {table!r}: {free} bytes free, "
                f"a write of {incoming} bytes would take the {self.reserved} bytes kept free "
                "(wal.reserved-bytes) for fencing and recovery; nothing was written, and writes "
                "resume once space returns"
            )
        with self._lock:
            self._spent += incoming
