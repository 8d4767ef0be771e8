"""Retention of WAL files: list them by block state and age, delete the expired ones.

A WAL is kept after its block is flushed into Hudi so streaming readers can catch up
without Hudi files; it may go once the block is flushed *and* the file is older than the
retention period (:attr:`WalConfig.retention`, default 7 days). A WAL whose block is not
flushed, or that is not even sealed, or that cannot be read, is never deleted.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from memtier.errors import CorruptFileError, UnknownFormatVersionError
from memtier.io import FileIO
from memtier.wal.reader import read_header, read_seal
from memtier.wal.storage import WalEntry, list_wals, wal_storage

__all__ = ["BlockState", "WalStatus", "delete_expired", "expired", "list_status"]

log = logging.getLogger(__name__)


class BlockState(enum.Enum):
    OPEN = "open"  # not sealed: being written, awaiting recovery, or unreadable
    SEALED = "sealed"  # sealed, not yet flushed
    FLUSHED = "flushed"  # sealed and flushed into a Hudi log file


@dataclass(frozen=True)
class WalStatus:
    """One WAL, the state of its block, and the time since it was last written."""

    entry: WalEntry
    state: BlockState
    age: timedelta


def _state(fileio: FileIO, entry: WalEntry, flushed: bool) -> BlockState:
    try:
        sealed = read_seal(fileio, entry.path, read_header(fileio, entry.path)) is not None
    except (CorruptFileError, UnknownFormatVersionError) as e:
        log.warning("%s: unreadable WAL, kept: %s", entry.path, e)
        return BlockState.OPEN
    if flushed and not sealed:
        log.warning("%s: its block is reported flushed but the WAL is not sealed; kept", entry.path)
    if not sealed:
        return BlockState.OPEN
    return BlockState.FLUSHED if flushed else BlockState.SEALED


def list_status(
    fileio: FileIO,
    root: str,
    *,
    is_flushed: Callable[[WalEntry], bool],
    now: float,
) -> list[WalStatus]:
    """Every WAL below ``root`` with its block state and age at ``now`` (epoch seconds).

    ``is_flushed`` says whether a WAL's block is in Hudi (the table server or the
    timeline knows; the WAL file cannot).
    """
    return [
        WalStatus(
            entry,
            _state(fileio, entry, is_flushed(entry)),
            timedelta(seconds=max(0.0, now - (entry.mtime if entry.mtime is not None else now))),
        )
        for entry in list_wals(fileio, root)
    ]


def expired(statuses: list[WalStatus], retention: timedelta) -> list[WalStatus]:
    """The WALs that may be deleted: flushed and older than ``retention``."""
    return [s for s in statuses if s.state is BlockState.FLUSHED and s.age > retention]


def delete_expired(
    fileio: FileIO,
    root: str,
    *,
    is_flushed: Callable[[WalEntry], bool],
    now: float,
    retention: timedelta,
) -> list[WalStatus]:
    """Delete the expired WALs below ``root``; returns what was deleted."""
    doomed = expired(list_status(fileio, root, is_flushed=is_flushed, now=now), retention)
    for status in doomed:
        wal_storage(fileio, status.entry.path).delete()
        log.info("deleted WAL %s (flushed, %s old)", status.entry.path, status.age)
    return doomed
