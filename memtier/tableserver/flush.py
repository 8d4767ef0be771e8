"""One flush's data work: a file group's rows (its blocks' committed frames) become Hudi
files of one deltacommit. Pure work on the table's files, no master and no blocks, so it
runs wherever the table server puts it (:mod:`memtier.tableserver.flusher`: a worker
process the table server owns, or inline).

Two steps, because the master must record the files before they exist: :meth:`FlushJob.plan`
(one row per key, which file each file group gets: the content of the inflight instant),
then :meth:`FlushJob.write` (the files, written durably: their write stats).
"""

from __future__ import annotations

import dataclasses
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memtier.errors import CommitFailedError
from memtier.hudi.basefile import sort_by_key
from memtier.hudi.deletes import DELETE_FLAG
from memtier.hudi.filegroup import FileGroupChange, FileGroupPlan
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.keys import KeyColumns
from memtier.hudi.merge import LogEntry, MergeSpec, fold_log
from memtier.hudi.routing import all_unique, keep_latest
from memtier.hudi.tablemeta import RECORD_KEY, TableMeta
from memtier.hudi.timeline import Timeline
from memtier.hudi.writer import ensure_partition_metadata, plan_changes, planned_metadata, write_files
from memtier.io import FileIO
from memtier.wal import FrameRef, read_frames

__all__ = ["FlushGroup", "FlushJob", "FlushRows", "FramePlaces", "PlaceLog", "Planned", "WalRows", "read_rows"]


@dataclass(frozen=True)
class FlushGroup:
    """One file group of a flush; ``new`` when the table has no file group for its bucket
    yet (its rows then become a base file, sorted by key, unless ordered deletes among
    them make it start with a log file)."""

    partition: str
    file_id: str
    new: bool


@dataclass(frozen=True)
class FramePlaces:
    """Where frames lie in the WAL stream, in order, compactly: the segments (path, CRC
    seed), and each frame's segment number, offset and length as one int64 array of
    shape (3, frames). A round of small writes holds tens of thousands of frames: a
    :class:`~memtier.wal.FrameRef` object each cost the table server ~0.3 us a frame to
    list and again to encode for the worker, under the interpreter lock that
    acknowledges writes."""

    segments: tuple[tuple[str, int], ...]
    places: np.ndarray

    @classmethod
    def of(cls, refs: Sequence[FrameRef]) -> FramePlaces:
        log = PlaceLog()
        for ref in refs:
            log.add(ref)
        return log.first(len(refs))

    @classmethod
    def joined(cls, parts: Sequence[FramePlaces]) -> FramePlaces:
        """The frames of ``parts``, one after the other."""
        segments: dict[tuple[str, int], int] = {}
        placed = []
        for part in parts:
            numbers = np.array([segments.setdefault(s, len(segments)) for s in part.segments], dtype=np.int64)
            renumbered = part.places.copy()
            renumbered[0] = numbers[part.places[0]] if len(numbers) else part.places[0]
            placed.append(renumbered)
        places = np.concatenate(placed, axis=1) if placed else np.zeros((3, 0), np.int64)
        return cls(tuple(segments), places)

    def __len__(self) -> int:
        return self.places.shape[1]

    def refs(self) -> list[FrameRef]:
        """Each frame's :class:`~memtier.wal.FrameRef`."""
        at, offsets, lengths = self.places.tolist()
        return [FrameRef(*self.segments[s], o, n) for s, o, n in zip(at, offsets, lengths, strict=True)]


class PlaceLog:
    """Where frames lie in the WAL stream, a frame an entry in order, kept as frames are
    added (a block keeps one: a flush takes its frames' places as arrays instead of
    visiting every frame under the interpreter lock that acknowledges writes)."""

    __slots__ = ("_numbers", "at", "lengths", "offsets", "segments")

    def __init__(self) -> None:
        self._numbers: dict[tuple[str, int], int] = {}
        self.segments: list[tuple[str, int]] = []
        self.at, self.offsets, self.lengths = array("q"), array("q"), array("q")

    def add(self, ref: FrameRef) -> None:
        segment = (ref.path, ref.seed)
        number = self._numbers.get(segment)
        if number is None:
            number = self._numbers[segment] = len(self.segments)
            self.segments.append(segment)
        self.at.append(number)
        self.offsets.append(ref.offset)
        self.lengths.append(ref.length)

    def first(self, count: int) -> FramePlaces:
        """The places of the first ``count`` frames (copied: the arrays keep growing)."""
        places = np.array([np.frombuffer(a, np.int64, count) for a in (self.at, self.offsets, self.lengths)])
        return FramePlaces(tuple(self.segments), places.reshape(3, count))


@dataclass(frozen=True)
class WalRows:
    """A file group's rows for a flush as where they lie in the WAL stream (each frame's
    record, in write order): whoever runs the flush reads them there
    (:func:`~memtier.wal.read_frames`), so they never cross a pipe. Blocks of older versions, with block files of their own,
    are flushed from a table of their rows instead."""

    places: FramePlaces
    num_rows: int


def read_rows(wal: FileIO, sources: Sequence[Sequence[FrameRef] | pa.Table], schema: pa.Schema) -> list[pa.Table]:
    """Each file group's rows, in order: a table as given, the rows of the frames at a
    sequence of refs read from the WAL on ``wal`` (``schema``: the table's, delete flag
    included). Every group's frames are read in one pass over the WAL, in file order: one
    write's frames for many file groups lie side by side, so reading group by group would
    read each write's pages once per group, a small read per frame."""
    refs = [ref for source in sources if not isinstance(source, pa.Table) for ref in source]
    frames = iter(read_frames(wal, refs, schema))
    return [
        source if isinstance(source, pa.Table)
        else pa.Table.from_batches([next(frames).batch for _ in source], schema=schema)
        for source in sources
    ]


#: A file group's rows for a flush: the rows, or where they lie in the WAL.
FlushRows = pa.Table | WalRows


@dataclass(frozen=True)
class Planned:
    """What a planned flush will write: the inflight instant's content (naming every
    file), and where each file group's rows go (a clustering may have moved a bucket to
    a new file group)."""

    metadata: bytes
    file_groups: list[tuple[str, str]]


def _change(meta: TableMeta, group: FlushGroup, rows: pa.Table) -> FileGroupChange | None:
    """The rows (delete flags last), one event per key (later writes winning as Hudi's
    pre-combine does, deletes included), the upserts sorted by key for a new file
    group's base file. An append-only table's rows are all kept."""
    if rows.num_rows == 0:
        return None
    flags = rows.column(DELETE_FLAG).combine_chunks()
    if DELETE_FLAG not in meta.physical.names:
        rows = rows.drop_columns([DELETE_FLAG])
    if meta.keyless:  # record keys are generated as the files are written
        return FileGroupChange(group.partition, group.file_id, upserts=rows)
    key_fields = meta.config.record_key_fields
    if not pc.any(flags).as_py():
        # one version per key, found on the integer key where there is one (a round holds
        # many versions of each key: their record-key strings are then made for the winners
        # only; other keys are made once, for every version, and the winners' taken)
        integer_keys = rows.column(meta.integer_key).to_numpy() if meta.integer_key else None
        record_keys = None if integer_keys is not None else KeyColumns.of(rows, key_fields).record_keys()
        keys = pa.array(integer_keys) if record_keys is None else record_keys
        order = keep_latest(
            rows, keys, integer_keys, meta.merge_spec.ordering_column,
            np.arange(rows.num_rows), unique=all_unique(keys, integer_keys), sort=group.new,
        )
        chosen = pa.array(order)
        upserts = rows.take(chosen)
        if record_keys is None:
            record_keys = KeyColumns.of(upserts, key_fields).record_keys()
        else:
            record_keys = record_keys.take(chosen)
        return FileGroupChange(group.partition, group.file_id, upserts=upserts, record_keys=record_keys)
    spec = MergeSpec(RECORD_KEY, meta.merge_spec.ordering_column)
    keyed = rows.append_column(RECORD_KEY, KeyColumns.of(rows, key_fields).record_keys())
    winners, deletes = fold_log([LogEntry(records=keyed, delete_mask=flags)], spec)
    if winners is not None and group.new and meta.integer_key is not None:
        winners = sort_by_key(winners, meta.integer_key)
    deleted = deletes.as_change()
    return FileGroupChange(
        group.partition, group.file_id,
        upserts=winners.drop_columns([RECORD_KEY]) if winners is not None else None,
        record_keys=winners.column(RECORD_KEY).combine_chunks() if winners is not None else None,
        deleted_keys=deleted[0] if deleted is not None else None,
        deleted_ordering=deleted[1] if deleted is not None else None,
    )


def _by_current_group(view: FileSystemView, work: Sequence[tuple[FlushGroup, pa.Table]]) -> list[tuple[FlushGroup, pa.Table]]:
    """The rows of each file group they go to now: a clustering may have moved a bucket to
    a new file group, and a table server may hold blocks of both (written before it heard
    of the move, or recovered from a WAL, and after): their rows become one change, the
    older file group's first, in the order they were written. Two changes would be two
    log files of one flush, which every reader orders by write token, not by write: the
    older rows could win (found by the chaos soak: deleted keys came back)."""
    merged: dict[tuple[str, str], tuple[FlushGroup, list[pa.Table]]] = {}
    for group, rows in work:
        target = (group.partition, view.current_group(group.partition, group.file_id))
        if target in merged:
            merged[target][1].append(rows)
        else:
            merged[target] = (dataclasses.replace(group, file_id=target[1]), [rows])
    return [(group, tables[0] if len(tables) == 1 else pa.concat_tables(tables)) for group, tables in merged.values()]


class FlushJob:
    """One flush at ``instant``: ``tables[i]`` holds the rows of ``groups[i]`` in write order."""

    def __init__(self, meta: TableMeta, instant: str, groups: Sequence[FlushGroup],
                 tables: Sequence[pa.Table]) -> None:
        self._meta = meta
        self._instant = instant
        self._work = list(zip(groups, tables, strict=True))
        self._plans: list[FileGroupPlan] | None = None
        self._timeline: Timeline | None = None

    def plan(self) -> Planned:
        """Build each file group's change and name its file. A file group a clustering is
        rewriting refuses the flush (:class:`CommitFailedError`: it waits for the
        clustering; nothing was written)."""
        meta = self._meta
        timeline = meta.timeline()
        view = FileSystemView.build(meta.io, meta.base_path, timeline)
        changes = [c for c in (_change(meta, g, t) for g, t in _by_current_group(view, self._work)) if c is not None]
        clustered = sorted({(c.partition_path, c.file_id) for c in changes} & set(view.pending_clustering))
        if clustered:
            raise CommitFailedError(f"a clustering of {clustered} began; the flush waits for it")
        self._plans = plan_changes(meta, changes, view, self._instant)
        self._timeline = timeline
        return Planned(planned_metadata(meta, self._plans, "UPSERT").to_json(),
                       [(c.partition_path, c.file_id) for c in changes])

    def write(self) -> list[dict[str, Any]]:
        """Write the planned files durably; their write stats."""
        if self._plans is None or self._timeline is None:
            raise RuntimeError("a flush is planned before it is written")
        meta = self._meta
        ensure_partition_metadata(meta, {p.change.partition_path for p in self._plans}, self._instant)
        stats = write_files(meta, self._plans, self._instant, self._timeline)
        return [s.to_dict() for s in stats]

