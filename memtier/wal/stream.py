"""One WAL stream per table and table server: one sync per group commit, not per file group.

Every block's frames go to the table server's stream for the table, each record naming its
block (format: :mod:`memtier.wal.format`), so a write that touches many file groups is
made durable by one group-committed sync (:class:`~memtier.wal.writer.WalWriter`'s leader
and followers). A stream is a run of *segments*
``<stream dir>/<incarnation>.<seq:016x>.stream``: a new one is started past
:data:`SEGMENT_BYTES` or :data:`SEGMENT_AGE_S`, and the first frame of a block in a
segment comes with a record declaring the block (its header), so every segment can be
read on its own.

The segments are the WAL: no block is written to disk a second time. A frame appended
is known by where its record lies (:class:`FrameRef`), so an evicted block is read back
from the segments (:func:`read_frames`), and recovery (:func:`recover_blocks`) gathers
each block's frames from every segment, torn tails cut off per block. A segment is
deleted once every block it holds is flushed into the Hudi table and it has been closed
for the WAL retention, or sooner when the flushed segments kept would exceed the retention
bytes, oldest first (:func:`retired`; :meth:`WalStream.delete_flushed`, with segments of
other incarnations: :func:`stale_segments`). Block files of older versions are still read
(:mod:`memtier.wal.reader`).
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from memtier.errors import (
    CorruptFileError,
    FencedError,
    NotAWalFileError,
    NotFoundError,
    UnknownFormatVersionError,
    WalClosedError,
    WalWriteFailedError,
)
from memtier.io import FileIO, join
from memtier.wal.fence import LIFE_DIGITS, is_fenced, new_life, read_bounds
from memtier.wal.format import (
    Selection,
    StreamContents,
    WalFrame,
    WalHeader,
    WalKind,
    declared_blocks,
    decode_frames_at,
    decode_stream,
    encode_declaration,
    frame_record,
    rows_record,
    selection_record,
)
from memtier.wal.replay import producer_high_water
from memtier.wal.reserve import SpaceReserve
from memtier.wal.storage import list_logs, wal_storage
from memtier.wal.writer import GroupCommitter, PendingAppend, WalWriter

__all__ = [
    "SEGMENT_AGE_S",
    "SEGMENT_BYTES",
    "STREAM_DIR",
    "FlushedSegment",
    "FrameRef",
    "QueuedFrames",
    "RecoveredBlock",
    "SegmentName",
    "StreamFrame",
    "WalStream",
    "delete_segments",
    "read_frames",
    "read_stream",
    "recover_blocks",
    "retired",
    "stale_segments",
    "stream_directory",
]

log = logging.getLogger(__name__)

#: A stream starts a new segment once its current one holds this many bytes ...
SEGMENT_BYTES = 64 << 20
#: ... or is this old, so a segment no writer appends to any more can be told by its age.
SEGMENT_AGE_S = 60.0

#: The directory of a table's stream segments (and fences), in the table's WAL directory.
STREAM_DIR = "_memtier_streams"


def stream_directory(wal_root: str, table: str) -> str:
    """Where the stream segments of ``table`` lie under the cluster's WAL root."""
    return join(wal_root, table, STREAM_DIR)


_SEGMENT = re.compile(r"^(?P<incarnation>[0-9a-f]{32})\.(?P<seq>[0-9a-f]{16})\.stream$")


@dataclass(frozen=True, order=True)
class SegmentName:
    """``<incarnation: 32 hex digits>.<seq: 16 hex digits>.stream``."""

    incarnation: str  # one per WalStream object: a restarted server writes new segments
    seq: int

    @property
    def life(self) -> str:
        """The life of the table server that wrote it (:mod:`memtier.wal.fence`): the
        incarnation's first half (random in segments of builds before fencing)."""
        return self.incarnation[:LIFE_DIGITS]

    @property
    def name(self) -> str:
        return f"{self.incarnation}.{self.seq:016x}.stream"

    @classmethod
    def parse(cls, name: str) -> SegmentName | None:
        match = _SEGMENT.match(name)
        return None if match is None else cls(match["incarnation"], int(match["seq"], 16))


@dataclass(frozen=True)
class StreamFrame:
    """One frame to append to a stream: the block it belongs to, its payload
    (:func:`~memtier.wal.format.frame_payload`) or its selection of the write's rows, and
    its row count."""

    block: WalHeader
    payload: pa.Buffer | Selection
    rows: int


@dataclass(frozen=True)
class FrameRef:
    """Where a frame's record lies: its segment, the segment's CRC seed, its offset and
    length (header included)."""

    path: str
    seed: int
    offset: int
    length: int


@dataclass(frozen=True)
class QueuedFrames:
    """One write's frames queued on a stream: the append to wait for, and where each
    frame's record lies (in the order the frames were given)."""

    pending: PendingAppend
    refs: tuple[FrameRef, ...]


class _Segment(WalWriter):
    """One segment: frames of many blocks, group-committed like any WAL."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        #: Whether the life writing this segment is fenced (set by the stream).
        self.fenced: Callable[[], bool] = lambda: False
        self._refs: dict[bytes, int] = {}  # a block header's file id -> its reference here
        self._next_ref = itertools.count(1)
        #: Every block with frames here, by file id.
        self.blocks: dict[bytes, WalHeader] = {}
        self.started = time.monotonic()
        #: When the stream rolled past it (seconds since the epoch), or None.
        self.closed_at: float | None = None

    def _before_ack(self) -> None:
        """Nothing is acknowledged once another server fenced this segment's life: it may
        have recovered this table's blocks already."""
        if self.fenced():
            raise FencedError(
                f"the WAL stream of table {self.header.table!r} of {self.header.file_group} was fenced "
                "(another table server took its buckets over): refresh the routing and retry"
            )

    def queue_frames(
        self, frames: Sequence[StreamFrame], *, txn_id: int, producer_id: bytes, producer_seq: int,
        rows: pa.Buffer | None = None,
    ) -> QueuedFrames:
        """Queue one frame per block (each declared first if new here) as one append, after
        the write's ``rows`` record when its frames are selections of them. The caller
        serializes the appends of each block."""
        parts: list[object] = []
        mark = self.durable_size
        ids = {"txn_id": txn_id, "producer_id": producer_id, "producer_seq": producer_seq, "sync_mark": mark}
        at, placed = 0, []  # each frame's offset from the start of the append, and length
        if rows is not None:
            record = rows_record(self.header.crc_seed, rows, **ids)
            parts += [record, rows]
            at = len(record) + rows.size
        for frame in frames:
            ref = self._refs.get(frame.block.file_id)
            if ref is None:
                ref = self._refs[frame.block.file_id] = next(self._next_ref)
                self.blocks[frame.block.file_id] = frame.block
                declaration = encode_declaration(self.header, frame.block, ref, sync_mark=mark)
                parts.append(declaration)
                at += len(declaration)
            if isinstance(frame.payload, Selection):  # from the rows record on, to its end
                assert rows is not None, "a selection follows the write's rows"
                selection = selection_record(self.header.crc_seed, frame.payload.payload(at), **ids, block_ref=ref)
                parts.append(selection)
                at += len(selection)
                placed.append((0, at))
                continue
            record = frame_record(self.header.crc_seed, frame.payload, **ids, block_ref=ref)
            parts += [record, frame.payload]
            placed.append((at, len(record) + frame.payload.size))
            at += len(record) + frame.payload.size
        pending = self._queue_append(tuple(parts), sum(f.rows for f in frames), len(frames))
        start, seed = pending.location.offset, self.header.crc_seed
        return QueuedFrames(pending, tuple(FrameRef(self.path, seed, start + o, n) for o, n in placed))


class WalStream:
    """The stream of one table on one table server; thread-safe."""

    def __init__(
        self,
        fileio: FileIO,
        directory: str,
        *,
        table: str,
        owner: str,
        committer: GroupCommitter,
        segment_bytes: int = SEGMENT_BYTES,
        segment_age_s: float = SEGMENT_AGE_S,
        life: str | None = None,
        reserve: SpaceReserve | None = None,
    ) -> None:
        """``owner`` names the table server, ``life`` its current life (its segments are
        fenced by it: :mod:`memtier.wal.fence`; a new one by default); ``reserve``: the
        free space its writes leave on the file system (:mod:`memtier.wal.reserve`)."""
        self._fileio = fileio
        self.directory = directory
        self._table = table
        self._owner = owner
        self._committer = committer
        self._segment_bytes = segment_bytes
        self._segment_age_s = segment_age_s
        self.life = life or new_life()
        self.incarnation = self.life + uuid.uuid4().hex[:LIFE_DIGITS]
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._current: _Segment | None = None
        self._segments: list[_Segment] = []  # not deleted yet, oldest first
        self._closed = False
        self._reserve = reserve

    def append(
        self,
        block: WalHeader,
        payload: pa.Buffer,
        rows: int,
        *,
        txn_id: int,
        producer_id: bytes,
        producer_seq: int,
    ) -> None:
        """Append one frame of ``block``; returns once durable (per the sync policy)."""
        self.queue(
            [StreamFrame(block, payload, rows)],
            txn_id=txn_id,
            producer_id=producer_id,
            producer_seq=producer_seq,
        ).pending.wait()

    def queue(
        self, frames: Sequence[StreamFrame], *, txn_id: int, producer_id: bytes, producer_seq: int,
        rows: pa.Buffer | None = None,
    ) -> QueuedFrames:
        """Queue one write's frames (one per block) as one append: one sync makes them all
        durable. Frames that are selections take rows of ``rows`` (the write's batch,
        :func:`~memtier.wal.format.frame_payload`), written once before them. The caller
        serializes the appends of each block (the stream order of a block's frames is the
        order of these calls) and must ``wait()`` for the result's pending append.
        :class:`WalWriteFailedError` when there is no room for them (a full disk, or the
        reserve reached), nothing written."""
        if self._reserve is not None:
            payloads = sum(f.payload.size for f in frames if isinstance(f.payload, pa.Buffer))
            self._reserve.check(payloads + (rows.size if rows is not None else 0), self._table)
        while True:
            segment = self._segment()
            try:
                return segment.queue_frames(
                    frames, txn_id=txn_id, producer_id=producer_id, producer_seq=producer_seq, rows=rows
                )
            except WalClosedError:
                if segment is self._current:
                    raise
                # the segment was rolled before these frames were queued: use the next

    def delete_flushed(
        self, is_flushed: Callable[[WalHeader], bool], *, retention_s: float, now: float,
        retention_bytes: int | None = None, others: Sequence[FlushedSegment] = (),
    ) -> int:
        """Delete the segments :func:`retired` picks (closed ``retention_s`` before
        ``now``, epoch seconds, or the oldest beyond ``retention_bytes``) among this
        stream's closed segments whose every block ``is_flushed`` and ``others`` (other
        incarnations' in its directory: :func:`stale_segments`, counted in the same
        bytes); how many. Deleting a large file takes a while (:mod:`memtier.diskpacing`):
        call it off the write path."""
        with self._lock:
            segments = list(self._segments)
        flushed = [
            FlushedSegment(s.path, s.size, s.closed_at) for s in segments
            if s.closed_at is not None and all(is_flushed(b) for b in list(s.blocks.values()))
        ]
        doomed = retired([*flushed, *others], retention_s=retention_s, retention_bytes=retention_bytes, now=now)
        paths = {s.path for s in doomed}
        with self._lock:
            self._segments = [s for s in self._segments if s.path not in paths]
        return delete_segments(self._fileio, doomed)

    def closed_bytes(self) -> int:
        """Bytes in this stream's closed segments not deleted yet, flushed or not."""
        with self._lock:
            return sum(s.size for s in self._segments if s.closed_at is not None)

    def roll_idle(self) -> None:
        """Close the current segment once it is past the segment age even if no write
        comes: no segment is appended to long after its last write, so other servers may
        take one unmodified for longer than that for stale (:func:`stale_segments`)."""
        with self._lock:
            current = self._current
            if current is not None and time.monotonic() - current.started >= self._segment_age_s:
                self._roll(current)
                self._current = None

    def close(self) -> None:
        """Sync and release the current segment (segments stay until their blocks are
        flushed: :meth:`delete_flushed`)."""
        with self._lock:
            self._closed = True
            if self._current is not None:
                self._roll(self._current)
                self._current = None

    def _cut_back(self, segment: _Segment) -> None:
        """A segment whose write or sync failed (a full disk, an I/O error) is cut back to
        what its syncs made durable, so that nothing it was refused is ever recovered from
        it, and closed: the stream goes on in a new segment, and writes resume as soon as
        the storage takes them again. Until it does, the cut fails and the write with it;
        the next write tries again. A fenced segment is not cut: its life is over."""
        failure = segment.failure
        if isinstance(failure, FencedError):
            raise FencedError(str(failure))
        try:
            wal_storage(self._fileio, segment.path).truncate(segment.durable_size)
        except Exception as e:
            raise WalWriteFailedError(
                f"{segment.path}: the WAL failed ({failure!r}) and cannot be cut back to its last "
                f"sync yet ({e}); writes to table {self._table!r} resume once it can"
            ) from e
        log.warning("%s failed (%r): cut back to its last sync at byte %d; going on in a new segment",
                    segment.path, failure, segment.durable_size)
        self._roll(segment)

    def _roll(self, segment: _Segment) -> None:
        """Close ``segment``: its queued frames are durable before anything follows."""
        segment.close()
        segment.closed_at = self._committer.clock()

    def _segment(self) -> _Segment:
        with self._lock:
            if self._closed:
                raise WalClosedError(f"the WAL stream in {self.directory} is closed")
            current = self._current
            if current is not None and current.failure is not None:
                self._cut_back(current)
                self._current = current = None
            if current is not None and (
                current.size < self._segment_bytes
                and time.monotonic() - current.started < self._segment_age_s
                and not current.reopened
            ):
                return current
            if current is not None:
                if current.reopened:  # on HDFS: closed now, not appended to for another minute
                    log.warning("%s was reopened after a failed sync; going on in a new segment", current.path)
                self._roll(current)
                self._current = None
            name = SegmentName(self.incarnation, next(self._seq))
            header = WalHeader(
                self._table,
                "",
                self._owner,
                name.seq,
                pa.schema([]),
                int(time.time() * 1000),
                kind=WalKind.STREAM,
            )
            path = join(self.directory, name.name)
            try:
                self._current = _Segment.create(self._fileio, path, header, self._committer)
            except OSError as e:  # a full disk, say: the next write tries again
                raise WalWriteFailedError(f"{path}: cannot start a WAL segment of table {self._table!r} "
                                          f"({e}); nothing was written") from e
            assert isinstance(self._current, _Segment)
            self._current.fenced = self.fenced
            self._segments.append(self._current)
            return self._current

    def fenced(self) -> bool:
        """Whether another table server fenced this stream's life (one existence check)."""
        return is_fenced(self._fileio, self.directory, self.life)

# -- reading and recovery ---------------------------------------------------------------------


def read_stream(fileio: FileIO, path: str) -> StreamContents:
    """Every intact record of the segment at ``path``, by block; it is not modified (a
    torn tail is skipped: the segment's writer may still be appending)."""
    return decode_stream(wal_storage(fileio, path).read(), path)


@dataclass(frozen=True, order=True)
class _Listed:
    """A segment of a stream directory, and how much of it counts: all (``limit`` None),
    or, written by a fenced life, the bytes its fence bounds."""

    name: SegmentName
    path: str
    size: int
    mtime: float | None
    limit: int | None

    def read(self, fileio: FileIO) -> pa.Buffer:
        data = wal_storage(fileio, self.path).read()
        return data if self.limit is None else data.slice(0, min(self.limit, data.size))


def _segments(fileio: FileIO, directory: str) -> tuple[list[_Listed], list[FlushedSegment]]:
    """The segments of ``directory`` that recovery reads, oldest first, and those it
    never reads: begun by a fenced life after its fence (their frames were never
    acknowledged), as if flushed."""
    bounds = read_bounds(fileio, directory)
    found, unread = [], []
    for info in list_logs(fileio, directory):
        name = SegmentName.parse(info.name)
        if name is None:
            continue
        fenced = bounds.get(name.life)
        limit = None if fenced is None else fenced.segments.get(info.name)
        if (fenced is not None and limit is None) or info.size == 0:  # (empty: its header never synced)
            unread.append(FlushedSegment(info.path, info.size, info.mtime or 0.0))
            continue
        found.append(_Listed(name, info.path, info.size, info.mtime, limit))
    return sorted(found), unread


def read_frames(fileio: FileIO, refs: Sequence[FrameRef], schema: pa.Schema) -> list[WalFrame]:
    """The frames whose records ``refs`` name (in that order), every byte checked. Only
    their bytes are read, frames lying close together in one read
    (:meth:`~memtier.wal.storage.WalStorage.read_ranges`: on local disk without readahead,
    a MiB at a time, so a flush reading its rows back does not hold up WAL syncs)."""
    frames: dict[int, WalFrame] = {}
    by_segment: dict[str, list[int]] = {}
    for i, ref in enumerate(refs):
        by_segment.setdefault(ref.path, []).append(i)
    for path, indices in by_segment.items():
        spans = _spans(refs, indices)
        read = wal_storage(fileio, path).read_ranges([(start, end - start) for start, end, _ in spans], synced=True)
        for (start, _, members), data in zip(spans, read, strict=True):
            places = [(refs[i].offset - start, refs[i].length) for i in members]
            decoded = decode_frames_at(data, places, refs[members[0]].seed, schema, path, base=start)
            frames.update(zip(members, decoded, strict=True))
    return [frames[i] for i in range(len(refs))]


#: Frames of one segment at most this far apart are read together (the bytes between too).
_SPAN_GAP = 64 << 10


def _spans(refs: Sequence[FrameRef], indices: Sequence[int]) -> list[tuple[int, int, list[int]]]:
    """The byte ranges ``(start, end, members)`` to read to cover the frames ``refs[i]``
    of ``indices`` (one segment's), frames at most :data:`_SPAN_GAP` apart in one range;
    ``members`` are indices of ``refs``."""
    spans: list[tuple[int, int, list[int]]] = []
    for i in sorted(indices, key=lambda i: refs[i].offset):
        ref = refs[i]
        if spans and ref.offset - spans[-1][1] <= _SPAN_GAP:
            start, end, members = spans[-1]
            members.append(i)
            spans[-1] = (start, max(end, ref.offset + ref.length), members)
        else:
            spans.append((ref.offset, ref.offset + ref.length, [i]))
    return spans


@dataclass(frozen=True)
class RecoveredBlock:
    """A block found in the segments: its frames in order and where each lies (none when
    only its producer sequence numbers were asked for), and the highest producer sequence
    number among them, per producer id."""

    header: WalHeader
    frames: list[WalFrame]
    refs: list[FrameRef]
    producer_seqs: dict[bytes, int]


def recover_blocks(
    fileio: FileIO, directory: str, wanted: Callable[[WalHeader], bool],
    decode: Callable[[WalHeader], bool] = lambda h: True,
) -> list[RecoveredBlock]:
    """Every ``wanted`` block found in the segments below ``directory``: the frames, in
    order, of those to ``decode`` (a block's frames may span segments of one incarnation),
    and the producer sequence numbers of all (read from record headers only for the
    others: e.g. blocks already flushed, whose retried writes must still be dropped). A
    decoded block with a damaged frame raises its
    :class:`~memtier.errors.CorruptFileError`; other blocks are unaffected, unless the
    damage lost frames of a block the segment cannot name (it might be wanted)."""
    blocks: dict[bytes, RecoveredBlock] = {}
    for segment in _segments(fileio, directory)[0]:
        path, data = segment.path, segment.read(fileio)
        declared = declared_blocks(data, path)
        if declared is not None and not any(decode(b.header) for b in declared if wanted(b.header)):
            for b in declared:  # nothing to decode here: the sequence numbers are enough
                if wanted(b.header):
                    _merge(_found(blocks, b.header).producer_seqs, b.producer_seqs)
            continue
        contents = decode_stream(data, path)
        if contents.error is not None:
            raise contents.error
        seed = contents.header.crc_seed
        for block in contents.blocks:
            if not wanted(block.header):
                continue
            if block.error is not None and decode(block.header):
                raise block.error
            found = _found(blocks, block.header)
            _merge(found.producer_seqs, producer_high_water(block.frames))
            if decode(block.header):
                found.frames.extend(block.frames)
                found.refs.extend(FrameRef(path, seed, f.offset, f.length) for f in block.frames)
    return list(blocks.values())


def _found(blocks: dict[bytes, RecoveredBlock], header: WalHeader) -> RecoveredBlock:
    return blocks.setdefault(header.file_id, RecoveredBlock(header, [], [], {}))


def _merge(seqs: dict[bytes, int], more: dict[bytes, int]) -> None:
    for producer, seq in more.items():
        seqs[producer] = max(seqs.get(producer, -1), seq)


def _declared(fileio: FileIO, segment: _Listed) -> tuple[WalHeader, ...]:
    """The blocks ``segment`` holds frames of (a damaged one decoded whole)."""
    path, data = segment.path, segment.read(fileio)
    declared = declared_blocks(data, path)
    if declared is not None:
        return tuple(b.header for b in declared)
    contents = decode_stream(data, path)
    if contents.error is not None:
        raise contents.error
    return tuple(b.header for b in contents.blocks)


@dataclass(frozen=True)
class FlushedSegment:
    """A segment whose every block is flushed: its size and when it was closed (for a
    segment of another incarnation, last modified), in seconds since the epoch."""

    path: str
    nbytes: int
    closed_at: float


def retired(
    segments: Sequence[FlushedSegment], *, retention_s: float, retention_bytes: int | None, now: float
) -> list[FlushedSegment]:
    """Which flushed ``segments`` the WAL retention lets go at ``now``: those closed at
    least ``retention_s`` ago, then, oldest first, as many more as it takes for the rest
    to fit in ``retention_bytes`` (None: no bound)."""
    kept = sum(s.nbytes for s in segments)
    doomed = []
    for segment in sorted(segments, key=lambda s: s.closed_at):
        if now - segment.closed_at >= retention_s or retention_bytes is not None and kept > retention_bytes:
            doomed.append(segment)
            kept -= segment.nbytes
    return doomed


def delete_segments(fileio: FileIO, segments: Sequence[FlushedSegment]) -> int:
    """Delete ``segments`` (one already gone, e.g. taken by another table server's
    retention, is no error); how many."""
    for segment in segments:
        wal_storage(fileio, segment.path).delete()
        log.info("deleted WAL stream segment %s (every block flushed)", segment.path)
    return len(segments)


def stale_segments(
    fileio: FileIO,
    directory: str,
    *,
    keep_incarnation: str | None,
    is_flushed: Callable[[WalHeader], bool],
    now: float,
    min_age_s: float,
) -> list[FlushedSegment]:
    """The segments in ``directory`` of other incarnations (servers that died or
    restarted, or gave the table up) unmodified for ``min_age_s`` (more than a segment's
    age, so no live writer appends to them) whose every block ``is_flushed`` (of a fenced
    life, every block within its bounds; one it began after its fence counts as
    flushed). A segment that cannot be read is left out (kept)."""
    listed, unread = _segments(fileio, directory)
    found = [s for s in unread if now - s.closed_at >= min_age_s]
    for segment in listed:
        if segment.name.incarnation == keep_incarnation or segment.mtime is None:
            continue
        if now - segment.mtime < min_age_s:
            continue
        try:
            blocks = _declared(fileio, segment)
        except (CorruptFileError, NotAWalFileError, UnknownFormatVersionError, NotFoundError) as e:
            log.warning("%s: unreadable WAL stream segment, kept: %s", segment.path, e)
            continue
        if all(is_flushed(b) for b in blocks):
            found.append(FlushedSegment(segment.path, segment.size, segment.mtime))
    return found
