"""The WAL on a real S3-compatible server (SeaweedFS): one object per group commit."""

from __future__ import annotations

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
    WalWriter,
    delete_expired,
    list_status,
    read_header,
    read_seal,
    read_wal,
    recover,
)
from tests.support.seaweedfs import S3Server
from tests.support.wal import batch_for, header, producer_id, wal_path, write_wal

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
