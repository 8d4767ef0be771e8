"""One WAL stream per table and table server: one sync per group commit, not per file group.

Every block's frames go to the table server's stream for the table, each record naming its
block (format: :mod:`memtier.wal.format`), so a write that touches many file groups is
made durable by one group-committed sync (:class:`~memtier.wal.writer.WalWriter`'s leader
and followers). A stream is a run of *segments*
``<stream dir>/<incarnation>.<seq:016x>.stream``: a new one is started past
:data:`SEGMENT_BYTES` or :data:`SEGMENT_AGE_S`, and the first frame of a block in a
segment comes with a record declaring the block (its block-file header), so every segment
can be read on its own.

A block's own file is written whole when the block is sealed (:func:`write_block_file`,
from the frames in memory; published at once, sealed). From then on the block is read,
evicted to and retained through its file as before; a segment is deleted once every block
it holds has its file. Recovery (:func:`recover_blocks`) gathers the frames of the blocks
that have no file yet from every segment, torn tails cut off per block.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from memtier.errors import (
    AlreadyExistsError,
    CorruptFileError,
    NotAWalFileError,
    NotFoundError,
    UnknownFormatVersionError,
    WalClosedError,
)
from memtier.io import FileIO, join
from memtier.wal.format import (
    FramePayload,
    StreamContents,
    WalFrame,
    WalHeader,
    WalKind,
    decode_stream,
    encode_block_file,
    encode_declaration,
    frame_record,
)
from memtier.wal.storage import list_logs, wal_storage
from memtier.wal.writer import GroupCommitter, PendingAppend, WalWriter

__all__ = [
    "SEGMENT_AGE_S",
    "SEGMENT_BYTES",
    "SegmentName",
    "StreamFrame",
    "WalStream",
    "delete_stale_segments",
    "read_stream",
    "recover_blocks",
    "write_block_file",
]

log = logging.getLogger(__name__)

#: A stream starts a new segment once its current one holds this many bytes ...
SEGMENT_BYTES = 64 << 20
#: ... or is this old, so a segment no writer appends to any more can be told by its age.
SEGMENT_AGE_S = 60.0

_SEGMENT = re.compile(r"^(?P<incarnation>[0-9a-f]{32})\.(?P<seq>[0-9a-f]{16})\.stream$")


@dataclass(frozen=True, order=True)
class SegmentName:
    """``<incarnation: 32 hex digits>.<seq: 16 hex digits>.stream``."""

    incarnation: str  # one per WalStream object: a restarted server writes new segments
    seq: int

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
    (:func:`~memtier.wal.format.frame_payload`) and its row count."""

    block: WalHeader
    payload: pa.Buffer
    rows: int


class _Segment(WalWriter):
    """One segment: frames of many blocks, group-committed like any WAL."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._refs: dict[bytes, int] = {}  # block file id -> its reference here
        self._next_ref = itertools.count(1)
        #: Blocks with frames here and no block file yet: the segment is needed for them.
        self.pending: set[bytes] = set()
        self.started = time.monotonic()

    def queue_frames(
        self, frames: Sequence[StreamFrame], *, txn_id: int, producer_id: bytes, producer_seq: int
    ) -> PendingAppend:
        """Queue one frame per block (each declared first if new here) as one append. The
        caller serializes the appends of each block."""
        parts: list[object] = []
        mark = self.durable_size
        for frame in frames:
            ref = self._refs.get(frame.block.file_id)
            if ref is None:
                ref = self._refs[frame.block.file_id] = next(self._next_ref)
                self.pending.add(frame.block.file_id)
                parts.append(encode_declaration(self.header, frame.block, ref, sync_mark=mark))
            record = frame_record(
                self.header.crc_seed,
                frame.payload,
                txn_id=txn_id,
                producer_id=producer_id,
                producer_seq=producer_seq,
                sync_mark=mark,
                block_ref=ref,
            )
            parts += [record, frame.payload]
        return self._queue_append(tuple(parts), sum(f.rows for f in frames), len(frames))


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
    ) -> None:
        self._fileio = fileio
        self.directory = directory
        self._table = table
        self._owner = owner
        self._committer = committer
        self._segment_bytes = segment_bytes
        self._segment_age_s = segment_age_s
        self.incarnation = uuid.uuid4().hex
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._current: _Segment | None = None
        self._segments: list[_Segment] = []  # not deleted yet, oldest first
        self._closed = False

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
        ).wait()

    def queue(
        self, frames: Sequence[StreamFrame], *, txn_id: int, producer_id: bytes, producer_seq: int
    ) -> PendingAppend:
        """Queue one write's frames (one per block) as one append: one sync makes them all
        durable. The caller serializes the appends of each block (the stream order of a
        block's frames is the order of these calls) and must ``wait()`` for the result."""
        while True:
            segment = self._segment()
            try:
                return segment.queue_frames(
                    frames, txn_id=txn_id, producer_id=producer_id, producer_seq=producer_seq
                )
            except WalClosedError:
                if segment is self._current:
                    raise
                # the segment was rolled before these frames were queued: use the next

    def materialized(self, block: WalHeader) -> None:
        """``block`` has its own block file now: segments left holding only such blocks
        are deleted."""
        with self._lock:
            for segment in self._segments:
                segment.pending.discard(block.file_id)
            self._delete_done()

    def close(self) -> None:
        """Sync and release the current segment; segments holding only blocks with files
        are deleted, the others stay for recovery."""
        with self._lock:
            self._closed = True
            if self._current is not None:
                self._current.close()
                self._current = None
            self._delete_done()

    def _segment(self) -> _Segment:
        with self._lock:
            if self._closed:
                raise WalClosedError(f"the WAL stream in {self.directory} is closed")
            current = self._current
            if current is not None and (
                current.size < self._segment_bytes
                and time.monotonic() - current.started < self._segment_age_s
            ):
                return current
            if current is not None:
                current.close()  # its queued frames are durable before the next segment starts
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
            self._current = _Segment.create(self._fileio, path, header, self._committer)
            assert isinstance(self._current, _Segment)
            self._segments.append(self._current)
            self._delete_done()
            return self._current

    def _delete_done(self) -> None:
        """Delete the closed segments no block needs any more (holding ``_lock``)."""
        keep = []
        for segment in self._segments:
            if segment is not self._current and not segment.pending:
                segment.close()
                wal_storage(self._fileio, segment.path).delete()
            else:
                keep.append(segment)
        self._segments = keep


# -- block files ----------------------------------------------------------------------------


def write_block_file(
    fileio: FileIO, path: str, header: WalHeader, frames: Iterable[FramePayload], sealed_ms: int
) -> bool:
    """Publish ``header``'s whole sealed block file at once; False if it exists already."""
    try:
        wal_storage(fileio, path).create(encode_block_file(header, frames, sealed_ms))
    except AlreadyExistsError:
        return False
    return True


# -- reading and recovery ---------------------------------------------------------------------


def read_stream(fileio: FileIO, path: str) -> StreamContents:
    """Every intact record of the segment at ``path``, by block; it is not modified (a
    torn tail is skipped: the segment's writer may still be appending)."""
    return decode_stream(wal_storage(fileio, path).read(), path)


def _segments(fileio: FileIO, directory: str) -> list[tuple[SegmentName, str, float | None]]:
    found = []
    for info in list_logs(fileio, directory):
        name = SegmentName.parse(info.name)
        if name is not None:
            found.append((name, info.path, info.mtime))
    return sorted(found)


def recover_blocks(
    fileio: FileIO, directory: str, wanted: Callable[[WalHeader], bool]
) -> list[tuple[WalHeader, list[WalFrame]]]:
    """The frames of every ``wanted`` block found in the segments below ``directory``, in
    order (a block's frames may span segments of one incarnation). A wanted block with a
    damaged frame raises its :class:`~memtier.errors.CorruptFileError`; other blocks are
    unaffected, unless the damage lost frames of a block the segment cannot name (it
    might be wanted)."""
    blocks: dict[bytes, tuple[WalHeader, list[WalFrame]]] = {}
    for _, path, _ in _segments(fileio, directory):
        contents = read_stream(fileio, path)
        if contents.error is not None:
            raise contents.error
        for block in contents.blocks:
            if not wanted(block.header):
                continue
            if block.error is not None:
                raise block.error
            blocks.setdefault(block.header.file_id, (block.header, []))[1].extend(block.frames)
    return list(blocks.values())


def delete_stale_segments(
    fileio: FileIO,
    directory: str,
    *,
    keep_incarnation: str | None,
    has_file: Callable[[WalHeader], bool],
    now: float,
    min_age_s: float = 2 * SEGMENT_AGE_S,
) -> int:
    """Delete segments of other incarnations (dead servers, or servers that roll past them
    after :data:`SEGMENT_AGE_S`) unmodified for ``min_age_s`` whose every block has its
    file; how many were deleted. A segment that cannot be read is kept."""
    deleted = 0
    for name, path, mtime in _segments(fileio, directory):
        if name.incarnation == keep_incarnation or mtime is None or now - mtime < min_age_s:
            continue
        try:
            contents = read_stream(fileio, path)
            if contents.error is not None:
                raise contents.error
        except (CorruptFileError, NotAWalFileError, UnknownFormatVersionError, NotFoundError) as e:
            log.warning("%s: unreadable WAL stream segment, kept: %s", path, e)
            continue
        blocks: Iterable[WalHeader] = [b.header for b in contents.blocks]
        if all(has_file(b) for b in blocks):
            wal_storage(fileio, path).delete()
            log.info("deleted WAL stream segment %s (every block has its file)", path)
            deleted += 1
    return deleted
