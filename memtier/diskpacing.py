"""Bulk writes and deletes on local disk that leave the WAL's syncs fast.

Measured on this project's machine (bench/RESULTS.md, "Background I/O and the WAL"): a
WAL fdatasync of one 550 KB write takes ~0.7 ms (p99 ~1.5-3 ms) alone, but 30-100 ms when
it lands while another file's 64 MB is fsync'd at once (the device queue holds the whole
64 MB ahead of it), and 10-20 ms when a 64 MB file is unlinked (ext4 mounted with
``discard`` trims the freed extents in the journal commit the WAL's sync waits for).

So bulk files (flushed log and base files, compaction and clustering output) are written
back as they are written, a window at a time (:class:`PacedFile`: ``sync_file_range``
every :data:`WINDOW` bytes, waiting for the window before), and large files are deleted a
step at a time (:func:`trickle_unlink`: holes punched from the end, then the unlink), as
RocksDB's ``bytes_per_sync`` and its delete scheduler do. Neither changes what is durable
when: the final fsync before a file is published stays. Holes, not truncation: a reader
that still has the file memory-mapped reads zeros (which every format here rejects)
instead of dying of SIGBUS.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from typing import BinaryIO

__all__ = ["STEP", "WINDOW", "PacedFile", "trickle_unlink"]

#: Bytes written back at a time while a bulk file is written.
WINDOW = 1 << 20
#: Bytes freed at a time when a large file is deleted ...
STEP = 8 << 20
#: ... and the pause after each step, so each lands in its own journal commit.
STEP_PAUSE_S = 0.005

_WAIT_BEFORE, _WRITE, _WAIT_AFTER = 1, 2, 4


_PUNCH_HOLE = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE


def _libc_function(name: str, *argtypes: type) -> ctypes._CFuncPtr | None:
    """A Linux libc call taking (fd, int, int64, int64 ...) and returning int, or None
    where libc lacks it; called through ctypes, which releases the GIL for the call."""
    try:
        function = getattr(ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function


_SYNC_FILE_RANGE = _libc_function(
    "sync_file_range", ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint
)
_FALLOCATE = _libc_function("fallocate", ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)


class PacedFile:
    """A binary file being written, written back to the device a :data:`WINDOW` at a
    time: each full window is queued for writeback and the one before it waited for, so
    at most two windows of this file are ever dirty or in flight. Where
    ``sync_file_range`` is missing or refused (not Linux, a filesystem without it), it
    writes as a plain file."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self._fd = file.fileno()
        self._written = 0  # bytes handed to write()
        self._queued = 0  # bytes queued for writeback
        self._paced = _SYNC_FILE_RANGE is not None

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        if not self._paced:
            return self._file.write(view)
        for start in range(0, len(view), WINDOW):  # a large write goes back a window at a time too
            piece = view[start : start + WINDOW]
            self._written += self._file.write(piece)
            if self._written - self._queued >= WINDOW:
                self._write_back()
        return len(view)

    def _write_back(self) -> None:
        self._file.flush()
        end = self._written - self._written % WINDOW
        assert _SYNC_FILE_RANGE is not None
        done = _SYNC_FILE_RANGE(self._fd, self._queued, end - self._queued, _WRITE)
        if done == 0 and self._queued:
            done = _SYNC_FILE_RANGE(self._fd, 0, self._queued, _WAIT_BEFORE)
        if done != 0:
            self._paced = False  # e.g. a filesystem that refuses it: write plainly
        self._queued = end

    def flush(self) -> None:
        self._file.flush()

    def tell(self) -> int:
        return self._file.tell()

    def fileno(self) -> int:
        return self._fd

    def __getattr__(self, name: str) -> object:  # what else writers ask of a file
        return getattr(self._file, name)


def trickle_unlink(path: str) -> None:
    """Delete the file at ``path`` (gone already is fine), freeing a large one a
    :data:`STEP` at a time from its end with a pause between steps: the caller waits
    ~:data:`STEP_PAUSE_S` per step, so call it off latency-sensitive paths."""
    try:
        if _FALLOCATE is not None and os.stat(path).st_size > STEP:
            _punch_holes(path)
        os.unlink(path)
    except FileNotFoundError:
        pass


def _punch_holes(path: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        end = os.fstat(fd).st_size
        while end > 0:
            start = max(0, end - STEP)
            assert _FALLOCATE is not None
            if _FALLOCATE(fd, _PUNCH_HOLE, start, end - start) != 0:
                return  # a filesystem without holes: the unlink frees it all at once
            end = start
            time.sleep(STEP_PAUSE_S)
    finally:
        os.close(fd)
