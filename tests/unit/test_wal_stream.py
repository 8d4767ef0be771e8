"""WAL streams: many blocks' frames in one group-committed stream, each block recovered on
its own, each frame read back by where it lies; segments deleted once their blocks are
flushed; version-1 block files still read."""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from memtier.errors import CorruptFileError, NotAWalFileError, WalClosedError
from memtier.io import FileIO, open_fileio
from memtier.io.base import AppendFile
from memtier.io.local import LocalFileIO
from memtier.wal import (
    FrameRef,
    GroupCommitter,
    SegmentName,
    StreamFrame,
    WalHeader,
    WalStream,
    WalWriter,
    delete_segments,
    read_frames,
    read_stream,
    read_wal,
    recover,
    recover_blocks,
    stale_segments,
)
from memtier.wal.format import RECORD_HEADER_SIZE, Selection, frame_payload
from memtier.wal.storage import list_logs
from tests.support.wal import SCHEMA, batch_for, header, producer_id

DATA = Path(__file__).resolve().parents[1] / "data"


@functools.cache
def block_header(block: int) -> WalHeader:
    return header(f"fg{block}")


def append(stream: WalStream, block: int, seq: int) -> None:
    h = block_header(block)
    batch = batch_for(block, seq)
    stream.append(
        h,
        frame_payload(SCHEMA, batch),
        batch.num_rows,
        txn_id=seq,
        producer_id=producer_id(block),
        producer_seq=seq,
    )


def segments(fileio: FileIO, directory: str) -> list[str]:
    return [i.path for i in list_logs(fileio, directory) if SegmentName.parse(i.name)]


def by_block(fileio: FileIO, directory: str) -> dict[str, list[int]]:
    return {
        b.header.file_group: [f.producer_seq for f in b.frames]
        for b in recover_blocks(fileio, directory, lambda h: True)
    }


def one_segment(root: str, *, writes: int, blocks: int) -> tuple[FileIO, str]:
    """A closed stream of one segment: ``writes`` frames of each of ``blocks`` blocks."""
    fileio = open_fileio(root)
    with GroupCommitter() as committer:
        stream = WalStream(fileio, f"{root}/s", table="t", owner="a", committer=committer)
        for seq in range(writes):
            for block in range(blocks):
                append(stream, block, seq)
        stream.close()
    [path] = segments(fileio, f"{root}/s")
    return fileio, path


@pytest.fixture
def root(tmp_path: Path) -> str:
    return str(tmp_path)


def test_one_sync_per_write_to_many_blocks(root: str) -> None:
    """Frames of several blocks queued at once share one sync."""
    from concurrent.futures import ThreadPoolExecutor

    fileio = open_fileio(root)
    with GroupCommitter() as committer, ThreadPoolExecutor(8) as pool:
        stream = WalStream(fileio, f"{root}/s", table="t", owner="a", committer=committer)
        append(stream, 0, 0)  # the segment exists
        before = committer.stats().syncs
        for seq in range(1, 21):
            list(pool.map(lambda b, seq=seq: append(stream, b, seq), range(8)))
        syncs = committer.stats().syncs - before
        stream.close()
    assert syncs < 20 * 8 / 2, syncs  # 160 frames; per-file WALs would sync 160 times
    found = by_block(fileio, f"{root}/s")
    assert found["fg0"] == list(range(21))
    assert all(found[f"fg{b}"] == list(range(1, 21)) for b in range(1, 8))



def test_an_empty_segment_a_writer_left_before_its_header_synced_is_skipped_then_deleted(root: str) -> None:
    """On HDFS a segment is created with its writer open and its header hsync'd after:
    a writer that died between the two leaves a file the NameNode counts empty. Recovery
    reads past it (nothing in it was acknowledged), and it goes as a stale segment."""
    fileio = open_fileio(root)
    with GroupCommitter() as committer:
        stream = WalStream(fileio, f"{root}/s", table="t", owner="a", committer=committer)
        for seq in range(3):
            append(stream, 0, seq)
        stream.close()
    empty = f"{root}/s/{SegmentName('f' * 32, 0).name}"
    fileio.write_atomic(empty, b"")
    assert by_block(fileio, f"{root}/s") == {"fg0": [0, 1, 2]}
    stale = stale_segments(fileio, f"{root}/s", keep_incarnation=stream.incarnation, is_flushed=lambda h: False,
                           now=time.time() + 3600, min_age_s=60)
    assert [s.path for s in stale] == [empty]

def test_blocks_span_segments_and_segments_go_once_their_blocks_are_flushed(root: str) -> None:
    fileio = open_fileio(root)
    with GroupCommitter() as committer:
        stream = WalStream(
            fileio, f"{root}/s", table="t", owner="a", committer=committer, segment_bytes=2000
        )
        for seq in range(12):
            for block in range(3):
                append(stream, block, seq)
        assert len(segments(fileio, f"{root}/s")) > 3
        found = by_block(fileio, f"{root}/s")
        assert found == {f"fg{b}": list(range(12)) for b in range(3)}
        for path in segments(fileio, f"{root}/s"):  # each declares the blocks it holds
            assert all(b.header == block_header(int(b.header.file_group[2:]))
                       for b in read_stream(fileio, path).blocks)
        flushed: set[str] = set()

        def delete(retention_s: float = 0.0, now: float | None = None) -> int:
            return stream.delete_flushed(lambda h: h.file_group in flushed, retention_s=retention_s,
                                         now=time.time() if now is None else now)

        def holding(names: set[str]) -> list[str]:  # closed segments of only these blocks
            return [p for p in segments(fileio, f"{root}/s")[:-1]
                    if {b.header.file_group for b in read_stream(fileio, p).blocks} <= names]

        assert delete() == 0  # nothing flushed
        flushed |= {"fg0", "fg1"}
        doomed = holding(flushed)
        assert delete() == len(doomed) and not set(doomed) & set(segments(fileio, f"{root}/s"))
        assert by_block(fileio, f"{root}/s")["fg2"] == list(range(12))  # fg2 keeps every frame
        flushed.add("fg2")
        assert delete(retention_s=3600) == 0  # flushed, but within the retention
        closed = segments(fileio, f"{root}/s")[:-1]
        sizes = [fileio.info(p).size for p in closed]
        assert stream.delete_flushed(lambda h: True, retention_s=3600, now=time.time(),
                                     retention_bytes=sum(sizes[1:])) == 1  # the oldest goes
        assert segments(fileio, f"{root}/s")[:-1] == closed[1:]
        before = len(segments(fileio, f"{root}/s"))
        assert delete(retention_s=3600, now=time.time() + 3601) == before - 1
        assert len(segments(fileio, f"{root}/s")) == 1  # the current one: never while written
        stream.close()
        assert delete() == 1
        assert segments(fileio, f"{root}/s") == []
        with pytest.raises(WalClosedError):
            append(stream, 0, 99)


class _ReopeningIO(LocalFileIO):
    """Local files whose append files say a failed sync reopened them once ``reopen`` is
    set (as HDFS's do after a new pipeline: :class:`memtier.io.hdfs.HdfsFileIO`)."""

    reopen = False

    def open_append(self, path: str) -> AppendFile:
        file = super().open_append(path)
        io = self

        class Reopening(type(file)):  # type: ignore[misc]
            @property
            def reopened(self) -> bool:
                return io.reopen

        file.__class__ = Reopening
        return file


def test_a_segment_reopened_after_a_failed_sync_is_closed_and_the_stream_goes_on_in_a_new_one(root: str) -> None:
    """On HDFS a sync that failed reopens the segment on a new pipeline and succeeds:
    appending on to such a file risks more than a new one (docs/hdfs.md), so the next
    write starts a new segment; every frame is recovered, in order."""
    fileio = _ReopeningIO(root)
    with GroupCommitter() as committer:
        stream = WalStream(fileio, f"{root}/s", table="t", owner="a", committer=committer)
        for seq in range(3):
            append(stream, 0, seq)
        assert len(segments(fileio, f"{root}/s")) == 1
        fileio.reopen = True  # every file says a failed sync reopened it
        append(stream, 0, 3)
        append(stream, 1, 0)
        assert len(segments(fileio, f"{root}/s")) == 3  # a new segment for each write
        fileio.reopen = False
        append(stream, 0, 4)
        append(stream, 0, 5)
        assert len(segments(fileio, f"{root}/s")) == 3  # the last one goes on
        stream.close()
    assert by_block(fileio, f"{root}/s") == {"fg0": [0, 1, 2, 3, 4, 5], "fg1": [0]}


def test_a_closed_stream_keeps_the_segments_of_blocks_without_files(root: str) -> None:
    fileio = open_fileio(root)
    with GroupCommitter() as committer:
        stream = WalStream(fileio, f"{root}/s", table="t", owner="a", committer=committer)
        append(stream, 0, 0)
        stream.close()
    assert len(segments(fileio, f"{root}/s")) == 1
    assert by_block(fileio, f"{root}/s") == {"fg0": [0]}


def test_frames_are_read_back_by_where_they_lie_and_checked(root: str) -> None:
    fileio = open_fileio(root)
    with GroupCommitter() as committer:
        stream = WalStream(
            fileio, f"{root}/s", table="t", owner="a", committer=committer, segment_bytes=3000
        )
        refs = []
        for seq in range(6):
            frames = [StreamFrame(block_header(b), frame_payload(SCHEMA, batch_for(b, seq)),
                                  batch_for(b, seq).num_rows) for b in (0, 1)]
            queued = stream.queue(frames, txn_id=seq, producer_id=producer_id(0), producer_seq=seq)
            queued.pending.wait()
            refs.append(queued.refs)
        stream.close()
    assert len({r.path for pair in refs for r in pair}) > 1  # spans segments
    for b in (0, 1):
        read = read_frames(fileio, [pair[b] for pair in refs], SCHEMA)
        assert [f.batch for f in read] == [batch_for(b, seq) for seq in range(6)]
        assert [(f.txn_id, f.producer_seq) for f in read] == [(seq, seq) for seq in range(6)]
        assert [(f.offset, f.length) for f in read] == [(pair[b].offset, pair[b].length) for pair in refs]
    backwards = [r for pair in reversed(refs) for r in pair]  # any order, segments mixed
    assert [f.offset for f in read_frames(fileio, backwards, SCHEMA)] == [r.offset for r in backwards]
    ref = refs[2][1]
    data = bytearray(fileio.read_bytes(ref.path))
    data[ref.offset + RECORD_HEADER_SIZE + 10] ^= 1  # the payload
    fileio.write_atomic(ref.path, bytes(data))
    with pytest.raises(CorruptFileError, match="payload checksum"):
        read_frames(fileio, [ref], SCHEMA)
    with pytest.raises(CorruptFileError, match="no intact frame"):
        read_frames(fileio, [dataclasses.replace(ref, offset=ref.offset + 8)], SCHEMA)
    last = refs[-1][1]
    fileio.write_atomic(last.path, fileio.read_bytes(last.path)[: last.offset + last.length - 1])  # torn
    with pytest.raises(CorruptFileError, match=f"corrupt at byte {last.offset}: .*incomplete"):
        read_frames(fileio, [last], SCHEMA)


def test_frames_selecting_rows_of_a_write_are_read_back_and_recovered_exactly(root: str) -> None:
    """Writes to three blocks as one rows record and a selection of it per block (runs and
    positions; every third write as a frame record per block): each block's frames, read
    back by where they lie across segments or recovered, hold exactly its rows."""
    fileio = open_fileio(root)
    written: dict[int, list[pa.RecordBatch]] = {b: [] for b in range(3)}
    refs: list[tuple[FrameRef, ...]] = []
    with GroupCommitter() as committer:
        stream = WalStream(
            fileio, f"{root}/s", table="t", owner="a", committer=committer, segment_bytes=3000
        )
        for seq in range(9):
            batch = batch_for(0, seq, rows=10)
            ids = {"txn_id": seq, "producer_id": producer_id(0), "producer_seq": seq}
            if seq % 3 == 2:
                payload = frame_payload(SCHEMA, batch)
                queued = stream.queue([StreamFrame(block_header(b), payload, 10) for b in range(3)], **ids)
                taken = [batch] * 3
            else:
                selections = [
                    Selection(4, seq % 7),
                    Selection.of(np.array([0, seq + 1, 9], np.int32)),
                    Selection.of(np.arange(seq, 10, dtype=np.int32)),  # consecutive: a run
                ]
                assert [s.positions is None for s in selections] == [True, False, True]
                frames = [StreamFrame(block_header(b), s, s.count) for b, s in enumerate(selections)]
                queued = stream.queue(frames, **ids, rows=frame_payload(SCHEMA, batch))
                taken = [s.rows_of(batch) for s in selections]
            queued.pending.wait()
            refs.append(queued.refs)
            for b in range(3):
                written[b].append(taken[b])
        stream.close()
    assert len({r.path for write in refs for r in write}) > 2  # spans segments
    # a shared write's frames all start at its rows record, each ending with its selection
    assert [len({r.offset for r in write}) for write in refs] == [1, 1, 3] * 3
    for b in range(3):
        read = read_frames(fileio, [write[b] for write in refs], SCHEMA)
        assert [f.batch for f in read] == written[b]
        assert [(f.txn_id, f.producer_seq) for f in read] == [(seq, seq) for seq in range(9)]
        assert [(f.offset, f.length) for f in read] == [(write[b].offset, write[b].length) for write in refs]
    backwards = [r for write in reversed(refs) for r in write]  # any order, segments mixed
    assert [f.batch for f in read_frames(fileio, backwards, SCHEMA)] == [
        written[b][seq] for seq in reversed(range(9)) for b in range(3)
    ]
    recovered = {b.header.file_group: b for b in recover_blocks(fileio, f"{root}/s", lambda h: True)}
    for b in range(3):
        assert [f.batch for f in recovered[f"fg{b}"].frames] == written[b]
        assert recovered[f"fg{b}"].refs == [write[b] for write in refs]


def test_stream_and_block_files_are_told_apart(root: str) -> None:
    fileio = open_fileio(root)
    with GroupCommitter() as committer:
        stream = WalStream(fileio, f"{root}/s", table="t", owner="a", committer=committer)
        append(stream, 0, 0)
        stream.close()
    [segment] = segments(fileio, f"{root}/s")
    with pytest.raises(NotAWalFileError, match="a WAL stream"):
        read_wal(fileio, segment)
    path = f"{root}/fg.0000000000000001.wal"
    with GroupCommitter() as committer:
        WalWriter.create(fileio, path, header(), committer).close()
    with pytest.raises(NotAWalFileError, match="a block file"):
        read_stream(fileio, path)


def test_version_1_block_files_are_still_read(tmp_path: Path) -> None:
    """Files written by format version 1 (kept in tests/data): read, recovered, resumed."""
    sealed = read_wal(open_fileio(str(DATA)), str(DATA / "v1-block.wal"))
    assert sealed.sealed and sealed.header.block_id == 7
    assert [(int.from_bytes(f.producer_id, "big"), f.producer_seq) for f in sealed.frames] == [
        (0, 0), (1, 0), (0, 1)
    ]
    assert all(f.batch.equals(batch_for(int.from_bytes(f.producer_id, "big"), f.producer_seq))
               for f in sealed.frames)
    copy = tmp_path / "fg2.0000000000000003.wal"
    shutil.copy(DATA / "v1-unsealed.wal", copy)
    fileio = open_fileio(str(tmp_path))
    contents = recover(fileio, str(copy)).contents
    assert not contents.sealed and [f.producer_seq for f in contents.frames] == [0, 1]
    with GroupCommitter() as committer:
        writer = WalWriter.resume(fileio, contents, committer)
        writer.append(batch_for(2, 2), txn_id=0, producer_id=producer_id(2), producer_seq=2)
        writer.seal()
    again = read_wal(fileio, str(copy))
    assert again.sealed and [f.producer_seq for f in again.frames] == [0, 1, 2]


def test_version_2_streams_are_still_read(tmp_path: Path) -> None:
    """A stream segment written by format version 2 (kept in tests/data: two blocks, three
    writes of a frame each): recovered, its frames read back by where they lie."""
    data = (DATA / "v2-stream.stream").read_bytes()
    assert int.from_bytes(data[8:10], "little") == 2
    directory = tmp_path / "s"
    directory.mkdir()
    (directory / f"{'a' * 32}.{0:016x}.stream").write_bytes(data)
    fileio = open_fileio(str(tmp_path))
    blocks = {b.header.file_group: b for b in recover_blocks(fileio, str(directory), lambda h: True)}
    assert sorted(blocks) == ["fg0", "fg1"]
    for name, block in blocks.items():
        expected = [batch_for(int(name[2:]), seq) for seq in range(3)]
        assert [f.batch for f in block.frames] == expected
        assert [f.batch for f in read_frames(fileio, block.refs, SCHEMA)] == expected


def test_stale_segments_of_other_incarnations_go_once_their_blocks_are_flushed(root: str) -> None:
    fileio = open_fileio(root)
    with GroupCommitter() as committer:
        dead = WalStream(fileio, f"{root}/s", table="t", owner="a", committer=committer)
        append(dead, 0, 0)
        append(dead, 1, 0)
        dead.close()
        live = WalStream(fileio, f"{root}/s", table="t", owner="a", committer=committer)
        append(live, 2, 0)
        flushed = {"fg0"}

        def sweep(now: float) -> int:
            return delete_segments(fileio, stale_segments(
                fileio, f"{root}/s", keep_incarnation=live.incarnation,
                is_flushed=lambda h: h.file_group in flushed, now=now, min_age_s=120,
            ))

        later = time.time() + 3600
        assert sweep(later) == 0  # fg1 is not flushed yet
        flushed.add("fg1")
        assert sweep(time.time()) == 0  # too recent: its writer may still append
        assert sweep(later) == 1
        assert by_block(fileio, f"{root}/s") == {"fg2": [0]}  # the live one is kept
        live.close()


def test_any_one_flipped_bit_of_a_record_header_is_repaired(root: str) -> None:
    """Each of the 512 bits of a frame's record header (magic, CRC, fields), flipped on
    its own: the stream still decodes to exactly the same frames of every block."""
    fileio, path = one_segment(root, writes=2, blocks=3)
    data = fileio.read_bytes(path)
    intact = by_block(fileio, f"{root}/s")
    frame = read_stream(fileio, path).blocks[1].frames[0]  # followed by later writes
    for bit in range(8 * RECORD_HEADER_SIZE):
        at = frame.offset + bit // 8
        fileio.write_atomic(path, data[:at] + bytes([data[at] ^ 1 << bit % 8]) + data[at + 1:])
        assert by_block(fileio, f"{root}/s") == intact, bit


def test_a_segment_s_blocks_are_listed_from_its_record_headers_alone(root: str) -> None:
    """What recovery and retention use to skip segments of flushed blocks without
    decoding them: the same blocks as a full decode, each with its producers' highest
    sequence numbers; None once a header does not verify."""
    from memtier.wal.format import declared_blocks

    fileio, path = one_segment(root, writes=3, blocks=4)
    data = fileio.read_bytes(path)
    listed = declared_blocks(pa.py_buffer(data), path)
    decoded = read_stream(fileio, path).blocks
    assert listed is not None and [b.header for b in listed] == [b.header for b in decoded]
    assert [b.producer_seqs for b in listed] == [{producer_id(b): 2} for b in range(4)]
    frame = read_stream(fileio, path).blocks[2].frames[1]
    damaged = bytearray(data)
    damaged[frame.offset + RECORD_HEADER_SIZE + 5] ^= 1  # a payload: not looked at
    assert declared_blocks(pa.py_buffer(bytes(damaged)), path) == listed
    damaged[frame.offset + 20] ^= 1  # its record header: the walk cannot go on
    assert declared_blocks(pa.py_buffer(bytes(damaged)), path) is None



_PAYLOAD_POOL_PROBE = """
import pyarrow as pa
from memtier.wal.format import frame_payload
from tests.support.wal import batch_for

batch = batch_for(1, 1, rows=10_000)
pools = (pa.mimalloc_memory_pool(), pa.default_memory_pool())
before = [p.bytes_allocated() for p in pools]
payload = frame_payload(batch.schema, batch)
print(payload.size, *(p.bytes_allocated() - b for p, b in zip(pools, before)))
"""


def test_a_payload_is_made_in_mimalloc_where_freed_pages_wait_for_the_next_write() -> None:
    """A table server allocates from jemalloc, which hands freed pages back at once; a
    write's payload, freed once written, comes from mimalloc instead, so the next one
    reuses its pages."""
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}
    out = subprocess.run([sys.executable, "-c", _PAYLOAD_POOL_PROBE], env=env, capture_output=True,
                         text=True, check=True, cwd=Path(__file__).resolve().parents[2])
    size, in_mimalloc, in_default = (int(n) for n in out.stdout.split())
    assert in_mimalloc >= size > 0
    assert in_default == 0
