"""Crash recovery of one WAL: verify every record, cut off a torn tail, report what is kept.

Everything an append acknowledged was synced, so it is intact; what follows the last
intact record was never acknowledged (a torn tail) and is cut off durably. Damage to
bytes that were durable raises :class:`CorruptFileError` naming the file and offset
(see :mod:`memtier.wal.format` for how the two are told apart). Recovery also reports the
highest sequence number per producer, so a table server can drop a retried write it holds.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import pyarrow as pa

from memtier.io import FileIO
from memtier.wal.format import WalContents, WalFrame
from memtier.wal.reader import read_wal
from memtier.wal.storage import wal_storage

__all__ = ["RecoveredWal", "producer_high_water", "recover"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecoveredWal:
    """A recovered WAL: its contents (with no tail left), what was cut, producer marks."""

    contents: WalContents
    truncated_bytes: int
    #: Highest producer sequence number in the file, per producer id.
    producer_seqs: Mapping[bytes, int]


def producer_high_water(frames: Iterable[WalFrame]) -> dict[bytes, int]:
    """The highest producer sequence number per producer id."""
    marks: dict[bytes, int] = {}
    for frame in frames:
        if frame.producer_seq >= marks.get(frame.producer_id, -1):
            marks[frame.producer_id] = frame.producer_seq
    return marks


def recover(fileio: FileIO, path: str, *, schema: pa.Schema | None = None) -> RecoveredWal:
    """Verify the WAL at ``path`` and durably cut off a torn tail (its writer must be gone)."""
    contents = read_wal(fileio, path, schema=schema)
    if contents.tail:
        log.warning(
            "%s: cutting off %d bytes of torn tail at byte %d", path, contents.tail, contents.size
        )
        wal_storage(fileio, path).truncate(contents.size)
    return RecoveredWal(
        dataclasses.replace(contents, tail=0),
        contents.tail,
        MappingProxyType(producer_high_water(contents.frames)),
    )
