"""The WAL on a real S3-compatible server (SeaweedFS): one object per group commit, for
block files and for a table server's stream of many blocks."""

from __future__ import annotations

import functools
import threading
import time
import uuid

import pytest

from memtier.config import WalConfig
from memtier.errors import CorruptFileError
from memtier.io import FileIO, join, open_fileio
from memtier.wal import (
    BlockState,
    GroupCommitter,
    SegmentName,
    WalHeader,
    WalStream,
    WalWriter,
    delete_expired,
    list_status,
    read_frames,
    read_header,
    read_seal,
    read_wal,
    recover,
    recover_blocks,
)
from memtier.wal.format import frame_payload
from memtier.wal.storage import list_logs
from tests.support.seaweedfs import S3Server
from tests.support.wal import SCHEMA, batch_for, header, producer_id, wal_path, write_wal

pytestmark = pytest.mark.s3


@pytest.fixture
def s3_root(s3_server: S3Server) -> str:
    return s3_server.uri(f"wal-{uuid.uuid4().hex}")


@pytest.fixture
def s3_io(s3_server: S3Server, s3_root: str) -> FileIO:
    fileio = open_fileio(s3_root, s3_server.storage_options)
    assert not fileio.supports_append
    return fileio


def test_concurrent_appends_one_object_per_commit(s3_io: FileIO, s3_root: str) -> None:
    path = wal_path(s3_io, s3_root)
    with GroupCommitter() as committer:
        writer = WalWriter.create(s3_io, path, header(), committer)
        threads = [
            threading.Thread(
                target=lambda t=t: [
                    writer.append(
                        batch_for(t, s), txn_id=0, producer_id=producer_id(t), producer_seq=s
                    )
                    for s in range(10)
                ]
            )
            for t in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        syncs = writer.stats().syncs
        assert syncs < 80  # group commits shared PUTs
        objects = [f.name for f in s3_io.list_files(path)]
        assert objects == [f"{i:012d}.wal" for i in range(syncs + 1)]  # header + one per commit
        live = read_wal(s3_io, path, end=writer.durable_size)
        assert len(live.frames) == 80
        seal = writer.seal()
    recovered = recover(s3_io, path)
    assert recovered.contents.sealed and recovered.contents.seal == seal
    assert dict(recovered.producer_seqs) == {producer_id(t): 9 for t in range(8)}
    assert read_header(s3_io, path) == recovered.contents.header
    assert read_seal(s3_io, path, recovered.contents.header) == seal


def test_abandoned_writer_then_resume(s3_io: FileIO, s3_root: str) -> None:
    """A writer that dies without closing leaves only whole objects; recovery reads them
    and the block continues in new objects."""
    path = wal_path(s3_io, s3_root)
    committer = GroupCommitter()
    writer = WalWriter.create(s3_io, path, header(), committer)
    for s in range(5):
        writer.append(batch_for(1, s), txn_id=0, producer_id=producer_id(1), producer_seq=s)
    recovered = recover(s3_io, path)  # the writer is simply dropped, as if its process died
    assert [f.producer_seq for f in recovered.contents.frames] == list(range(5))
    with GroupCommitter() as second:
        resumed = WalWriter.resume(s3_io, recovered.contents, second)
        resumed.append(batch_for(1, 5), txn_id=0, producer_id=producer_id(1), producer_seq=5)
        resumed.seal()
    assert [f.producer_seq for f in read_wal(s3_io, path).frames] == list(range(6))


def test_torn_last_object_is_cut_off(s3_io: FileIO, s3_root: str) -> None:
    path = wal_path(s3_io, s3_root)
    locations = write_wal(s3_io, path, [(1, s) for s in range(4)])
    last = s3_io.list_files(path)[-1]
    s3_io.write_atomic(last.path, s3_io.read_bytes(last.path)[:-10])
    recovered = recover(s3_io, path)
    assert (
        len(recovered.contents.frames) == 3
        and recovered.truncated_bytes == locations[-1].length - 10
    )
    assert sum(f.size for f in s3_io.list_files(path)) == locations[-1].offset
    assert recover(s3_io, path).truncated_bytes == 0


def test_a_missing_object_is_corruption(s3_io: FileIO, s3_root: str) -> None:
    path = wal_path(s3_io, s3_root)
    write_wal(s3_io, path, [(1, s) for s in range(3)])
    s3_io.delete(join(path, "000000000002.wal"))
    with pytest.raises(CorruptFileError, match=r"object 000000000002\.wal is missing"):
        recover(s3_io, path)


def test_retention_on_s3(s3_io: FileIO, s3_root: str) -> None:
    open_path = wal_path(s3_io, s3_root, "fg", 1)
    flushed_path = wal_path(s3_io, s3_root, "fg", 2)
    write_wal(s3_io, open_path, [(1, 0)], wal_header=header("fg", 1))
    write_wal(s3_io, flushed_path, [(1, 0)], seal=True, wal_header=header("fg", 2))
    later = time.time() + 8 * 86400
    states = {
        s.entry.path: s.state
        for s in list_status(s3_io, s3_root, is_flushed=lambda e: True, now=later)
    }
    assert states == {open_path: BlockState.OPEN, flushed_path: BlockState.FLUSHED}
    deleted = delete_expired(
        s3_io, s3_root, is_flushed=lambda e: True, now=later, retention=WalConfig().retention
    )
    assert [s.entry.path for s in deleted] == [flushed_path]
    assert s3_io.list_files(flushed_path) == [] and s3_io.list_files(open_path) != []


@functools.cache
def _block_header(block: int) -> WalHeader:
    return header(f"fg{block}")


def _append(stream: WalStream, block: int, seq: int) -> None:
    batch = batch_for(block, seq)
    stream.append(_block_header(block), frame_payload(SCHEMA, batch), batch.num_rows,
                  txn_id=0, producer_id=producer_id(block), producer_seq=seq)


def _recovered(fileio: FileIO, directory: str) -> dict[str, list[int]]:
    return {b.header.file_group: [f.producer_seq for f in b.frames]
            for b in recover_blocks(fileio, directory, lambda h: True)}


def test_stream_of_many_blocks_on_s3(s3_io: FileIO, s3_root: str) -> None:
    """A table server's stream on S3: concurrent writes to 8 blocks share group commits;
    a writer dropped without closing (its process died) leaves every acknowledged frame
    recoverable per block and readable by where it lies; flushed blocks let their segments go."""
    from concurrent.futures import ThreadPoolExecutor

    directory = join(s3_root, "stream")
    committer = GroupCommitter()
    stream = WalStream(s3_io, directory, table="t", owner="a", committer=committer,
                       segment_bytes=20_000)
    with ThreadPoolExecutor(8) as pool:
        for seq in range(6):
            list(pool.map(lambda b, seq=seq: _append(stream, b, seq), range(8)))
    assert committer.stats().syncs < 6 * 8  # writes to many blocks shared their syncs
    segments = [i for i in list_logs(s3_io, directory) if SegmentName.parse(i.name)]
    assert len(segments) > 1  # the stream rolled over to new segments
    assert _recovered(s3_io, directory) == {f"fg{b}": list(range(6)) for b in range(8)}

    for block in recover_blocks(s3_io, directory, lambda h: True):
        assert [f.batch for f in read_frames(s3_io, block.refs, SCHEMA)] == [f.batch for f in block.frames]
    stream.close()
    assert stream.delete_flushed(lambda h: True, retention_s=0, now=time.time()) == len(segments)
    committer.close()
    assert [i for i in list_logs(s3_io, directory) if SegmentName.parse(i.name)] == []


def test_torn_tail_of_a_stream_on_s3_cuts_only_the_last_frame(s3_io: FileIO, s3_root: str) -> None:
    directory = join(s3_root, "stream")
    with GroupCommitter() as committer:
        stream = WalStream(s3_io, directory, table="t", owner="a", committer=committer)
        for seq in range(3):
            for block in range(2):
                _append(stream, block, seq)
        [segment] = [i for i in list_logs(s3_io, directory) if SegmentName.parse(i.name)]
        last = s3_io.list_files(segment.path)[-1]  # the last group commit's object: fg1's seq 2
        s3_io.write_atomic(last.path, s3_io.read_bytes(last.path)[:-10])
        assert _recovered(s3_io, directory) == {"fg0": [0, 1, 2], "fg1": [0, 1]}
