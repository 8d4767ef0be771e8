"""Fencing a table server's WAL streams, so that a server taken for dead (paused, cut
off, or replaced by a restart) can neither acknowledge a write nor have one recovered
after another server took its buckets.

A table server writes its streams under a *life*: :data:`LIFE_DIGITS` hex digits, new
each time the process starts or is reset after losing its buckets, and the first half of
the incarnation of every stream it starts (:class:`~memtier.wal.stream.SegmentName`), so
a stream directory's listing tells which life wrote each segment. Before another server
recovers buckets from a life's segments, the master fences the life in that table's
stream directory, in two steps:

1. ``<life>.fence`` is created. The life's writer looks for it after every sync and
   before any acknowledgement (:meth:`~memtier.wal.writer.WalWriter._after_sync`): a write
   acknowledged was synced before the marker existed, so it lies within what step 2
   measures; every later one is refused with :class:`~memtier.errors.FencedError`.
2. ``<life>.bounds`` records each of the life's segments and its length once the marker
   exists; the first to write it wins (created exclusively), so every recovery reads the
   same bytes. Recovery reads a fenced life's segments up to those lengths only, and none
   that it does not list: what the fenced writer appended afterwards was never
   acknowledged and is never read back.

Both files are small and kept for as long as the directory (a paused process may wake up
at any time: only the marker stops it). A fence left half made (the master died between
the steps) is completed by whoever reads it next (:func:`read_bounds`).
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from memtier.errors import (
    AlreadyExistsError,
    CorruptFileError,
    InvalidArgumentError,
    NotFoundError,
    StorageError,
)
from memtier.io import FileIO, join
from memtier.jsonfile import decode
from memtier.wal.storage import list_logs

__all__ = [
    "LIFE_DIGITS",
    "Bounds",
    "fence",
    "fence_path",
    "is_fenced",
    "life_of",
    "new_life",
    "read_bounds",
]

log = logging.getLogger(__name__)

#: Hex digits of a life: the first half of a stream incarnation's 32.
LIFE_DIGITS = 16
_FORMAT = "memtier-wal-fence"
_VERSION = 1
_FENCE = ".fence"
_BOUNDS = ".bounds"
_LIFE = re.compile(rf"^[0-9a-f]{{{LIFE_DIGITS}}}$")
_SEGMENT_OF = re.compile(rf"^(?P<life>[0-9a-f]{{{LIFE_DIGITS}}})[0-9a-f]{{{LIFE_DIGITS}}}\.[0-9a-f]{{16}}\.stream$")


def new_life() -> str:
    """A fresh life: random, so lives of different processes never meet."""
    return uuid.uuid4().hex[:LIFE_DIGITS]


def life_of(segment_name: str) -> str | None:
    """The life that wrote the stream segment called ``segment_name`` (None: not a segment)."""
    match = _SEGMENT_OF.match(segment_name)
    return None if match is None else match["life"]


def fence_path(directory: str, life: str) -> str:
    """The marker whose existence fences ``life`` in the stream ``directory``."""
    return join(directory, _checked(life) + _FENCE)


def is_fenced(fileio: FileIO, directory: str, life: str) -> bool:
    """Whether ``life`` is fenced in ``directory``: one existence check (what a writer
    asks after every sync)."""
    return fileio.exists(fence_path(directory, life))


@dataclass(frozen=True)
class Bounds:
    """What is left of a fenced life in one stream directory: each of its segments, by
    name, and how many of its bytes recovery reads."""

    life: str
    server: str  # the table server that lived it
    fenced_by: str  # who fenced it (for people reading the directory)
    segments: Mapping[str, int] = field(default_factory=dict)
    fenced_ms: int = 0

    def to_json(self) -> bytes:
        return json.dumps({
            "format": _FORMAT, "version": _VERSION, "life": self.life, "server": self.server,
            "fenced_by": self.fenced_by, "segments": dict(self.segments), "fenced_ms": self.fenced_ms,
        }, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, path: str) -> Bounds:
        body = decode(data, path, _FORMAT, (_VERSION,), "WAL fence")
        try:
            segments = {str(name): int(length) for name, length in body["segments"].items()}
            return cls(_checked(body["life"]), str(body["server"]), str(body["fenced_by"]),
                       MappingProxyType(segments), int(body["fenced_ms"]))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CorruptFileError(path, 0, f"WAL fence is missing or mangles a field: {e!r}") from e


def fence(fileio: FileIO, directory: str, life: str, *, server: str, by: str) -> Bounds:
    """Fence ``life`` (of table server ``server``) in the stream ``directory``, on behalf
    of ``by``: the marker first, then the bounds (those already recorded, if another got
    there first). Safe to repeat; returns the bounds recovery will use.
    :class:`StorageError` naming the life when the storage refuses (a full disk: the
    table servers leave ``wal.reserved-bytes`` free for this, :mod:`memtier.wal.reserve`)."""
    marker = Bounds(life, server, by, {}, int(time.time() * 1000))
    try:
        try:
            fileio.create_exclusive(fence_path(directory, life), marker.to_json())
            log.warning("fenced WAL streams of %s (life %s) in %s for %s", server, life, directory, by)
        except AlreadyExistsError:
            pass
        return _bound(fileio, directory, marker)
    except OSError as e:
        if isinstance(e, StorageError):
            raise
        raise StorageError(f"cannot fence life {life} of table server {server} in {directory} ({e}): its "
                           "buckets move to another server once the storage takes the fence") from e


def _bound(fileio: FileIO, directory: str, marker: Bounds) -> Bounds:
    """The bounds of a fenced life: read, or measured now and recorded (first one wins)."""
    path = join(directory, marker.life + _BOUNDS)
    try:
        return Bounds.from_json(fileio.read_bytes(path), path)
    except NotFoundError:
        pass
    segments = {info.name: info.size for info in list_logs(fileio, directory) if life_of(info.name) == marker.life}
    bounds = Bounds(marker.life, marker.server, marker.fenced_by, MappingProxyType(segments), marker.fenced_ms)
    try:
        fileio.create_exclusive(path, bounds.to_json())
        return bounds
    except AlreadyExistsError:
        return Bounds.from_json(fileio.read_bytes(path), path)


def read_bounds(fileio: FileIO, directory: str) -> dict[str, Bounds]:
    """The bounds of every life fenced in the stream ``directory``, by life; a fence whose
    bounds were never recorded (its maker died between the steps) is completed now."""
    found: dict[str, Bounds] = {}
    markers: dict[str, str] = {}
    for info in fileio.list_dir(directory):
        life, _, suffix = info.name.partition(".")
        if not _LIFE.match(life):
            continue
        if "." + suffix == _BOUNDS:
            found[life] = Bounds.from_json(fileio.read_bytes(info.path), info.path)
        elif "." + suffix == _FENCE:
            markers[life] = info.path
    for life, path in markers.items():
        if life not in found:
            found[life] = _bound(fileio, directory, Bounds.from_json(fileio.read_bytes(path), path))
    return found


def _checked(life: Any) -> str:
    if not isinstance(life, str) or not _LIFE.match(life):
        raise InvalidArgumentError(f"not a table server life ({LIFE_DIGITS} hex digits): {life!r}")
    return life
