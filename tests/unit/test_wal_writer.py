"""WalWriter and GroupCommitter: durability per policy, group commit, seal, resume, failure."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from memtier.config import SyncPolicy, WalConfig
from memtier.errors import (
    AlreadyExistsError,
    SchemaMismatchError,
    WalClosedError,
    WalWriteFailedError,
)
from memtier.io import FileIO, open_fileio
from memtier.wal import FrameLocation, GroupCommitter, WalWriter, read_wal, recover
from memtier.wal.format import encode_header
from memtier.wal.storage import WalSink, wal_storage
from tests.support.wal import (
    ObjectStoreOnMemory,
    batch_for,
    header,
    producer_id,
    wal_path,
    write_wal,
)


def append(writer: WalWriter, p: int, s: int) -> FrameLocation:
    return writer.append(batch_for(p, s), txn_id=s // 4, producer_id=producer_id(p), producer_seq=s)


def test_append_then_read(fileio: FileIO, any_root: str) -> None:
    path = wal_path(fileio, any_root)
    with GroupCommitter() as committer:
        writer = WalWriter.create(fileio, path, header(), committer)
        locations = [append(writer, 1, s) for s in range(5)]
        assert writer.durable_size == writer.size == locations[-1].end
        contents = read_wal(fileio, path)
        assert [(f.offset, f.length) for f in contents.frames] == [
            (x.offset, x.length) for x in locations
        ]
        assert [f.batch for f in contents.frames] == [batch_for(1, s) for s in range(5)]
        assert not contents.sealed
        writer.close()
        assert committer.stats().appends == 5


def test_every_append_is_synced_alone_with_one_writer(tmp_path: Path) -> None:
    fileio = open_fileio(str(tmp_path))
    with GroupCommitter() as committer:
        writer = WalWriter.create(fileio, wal_path(fileio, str(tmp_path)), header(), committer)
        for s in range(20):
            append(writer, 1, s)
        assert writer.stats().syncs == 20  # nothing to share a sync with, and no waiting
        writer.close()


def test_create_refuses_an_existing_wal(fileio: FileIO, any_root: str) -> None:
    path = wal_path(fileio, any_root)
    write_wal(fileio, path, [(1, 0)])
    with GroupCommitter() as committer, pytest.raises(AlreadyExistsError):
        WalWriter.create(fileio, path, header(), committer)
    assert len(read_wal(fileio, path).frames) == 1


def test_wrong_schema_is_refused_before_anything_is_written(fileio: FileIO, any_root: str) -> None:
    path = wal_path(fileio, any_root)
    with GroupCommitter() as committer:
        writer = WalWriter.create(fileio, path, header(), committer)
        size = writer.size
        bad = pa.record_batch({"producer": pa.array([1], pa.int32())})
        with pytest.raises(SchemaMismatchError, match="'producer' is int32, expected int64"):
            writer.append(bad, txn_id=0, producer_id=producer_id(1), producer_seq=0)
        assert writer.size == size and fileio.info(path).size == size
        writer.close()


def test_seal_closes_the_block(fileio: FileIO, any_root: str) -> None:
    path = wal_path(fileio, any_root)
    with GroupCommitter() as committer:
        writer = WalWriter.create(fileio, path, header(), committer)
        for s in range(3):
            append(writer, 2, s)
        seal = writer.seal()
        assert writer.sealed and seal.frame_count == 3
        with pytest.raises(WalClosedError, match="sealed"):
            append(writer, 2, 3)
        with pytest.raises(WalClosedError):
            writer.seal()
    contents = read_wal(fileio, path)
    assert contents.seal == seal and contents.row_count == seal.row_count
    assert contents.size == fileio.info(path).size


def test_resume_an_unsealed_block(fileio: FileIO, any_root: str) -> None:
    path = wal_path(fileio, any_root)
    write_wal(fileio, path, [(1, 0), (1, 1)])
    recovered = recover(fileio, path)
    with GroupCommitter() as committer:
        writer = WalWriter.resume(fileio, recovered.contents, committer)
        assert writer.frame_count == 2 and writer.size == recovered.contents.size
        append(writer, 1, 2)
        writer.seal()
    contents = read_wal(fileio, path)
    assert [f.producer_seq for f in contents.frames] == [0, 1, 2]
    assert contents.seal is not None and contents.seal.frame_count == 3
    with GroupCommitter() as committer, pytest.raises(WalClosedError, match="sealed"):
        WalWriter.resume(fileio, contents, committer)


def test_concurrent_appends_share_syncs(tmp_path: Path) -> None:
    """Many threads over many files: every acknowledged frame is recovered, in each
    producer's order, and far fewer syncs than appends were needed."""
    fileio = open_fileio(str(tmp_path))
    files, threads, per_thread = 4, 24, 60
    acked: dict[int, list[int]] = {t: [] for t in range(threads)}
    with GroupCommitter() as committer:
        writers = [
            WalWriter.create(
                fileio, wal_path(fileio, str(tmp_path), f"fg{i}"), header(f"fg{i}"), committer
            )
            for i in range(files)
        ]
        start = threading.Barrier(threads)

        def run(t: int) -> None:
            start.wait()
            for s in range(per_thread):
                append(writers[t % files], t, s)
                acked[t].append(s)

        workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        stats = committer.stats()
        for writer in writers:
            writer.close()
    assert stats.appends == threads * per_thread
    assert stats.syncs <= stats.appends / 2, stats  # 6 writers a file: 2+ appends a sync
    for i in range(files):
        contents = recover(fileio, wal_path(fileio, str(tmp_path), f"fg{i}")).contents
        by_producer: dict[int, list[int]] = {}
        for frame in contents.frames:
            p = int.from_bytes(frame.producer_id, "big")
            by_producer.setdefault(p, []).append(frame.producer_seq)
            assert frame.batch.equals(batch_for(p, frame.producer_seq))
        assert by_producer == {t: acked[t] for t in range(threads) if t % files == i}


def test_interval_policy_acknowledges_before_the_sync(tmp_path: Path) -> None:
    fileio = open_fileio(str(tmp_path))
    config = WalConfig(sync_policy=SyncPolicy.INTERVAL, sync_interval=timedelta(hours=1))
    with GroupCommitter(config) as committer:
        writer = WalWriter.create(fileio, wal_path(fileio, str(tmp_path)), header(), committer)
        for s in range(10):
            append(writer, 1, s)
        assert writer.stats().syncs == 0 and writer.durable_size < writer.size
        assert writer.sync() == writer.size == writer.durable_size
        assert writer.stats().syncs == 1
        writer.close()


def test_interval_policy_syncs_in_the_background(tmp_path: Path) -> None:
    fileio = open_fileio(str(tmp_path))
    config = WalConfig(sync_policy=SyncPolicy.INTERVAL, sync_interval=timedelta(milliseconds=5))
    with GroupCommitter(config) as committer:
        writer = WalWriter.create(fileio, wal_path(fileio, str(tmp_path)), header(), committer)
        append(writer, 1, 0)
        deadline = time.monotonic() + 10
        while writer.durable_size < writer.size and time.monotonic() < deadline:
            time.sleep(0.001)
        assert writer.durable_size == writer.size
        writer.close()


def test_group_window_policy(tmp_path: Path) -> None:
    fileio = open_fileio(str(tmp_path))
    config = WalConfig(sync_policy=SyncPolicy.GROUP_WINDOW, group_window=timedelta(milliseconds=2))
    with GroupCommitter(config) as committer:
        writer = WalWriter.create(fileio, wal_path(fileio, str(tmp_path)), header(), committer)
        threads = [
            threading.Thread(target=lambda t=t: [append(writer, t, s) for s in range(10)])
            for t in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert writer.durable_size == writer.size
        assert writer.stats().syncs < 80 / 2
        writer.close()
    assert len(read_wal(fileio, wal_path(fileio, str(tmp_path))).frames) == 80


class FlakySink(WalSink):
    """Writes to a real sink; its syncs fail once ``fail`` is set."""

    def __init__(self, inner: WalSink) -> None:
        self.inner = inner
        self.fail = threading.Event()
        self.syncing = threading.Event()
        self.release = threading.Event()

    def write(self, parts: Sequence[Any]) -> None:
        self.inner.write(parts)

    def sync(self) -> bool:
        self.syncing.set()
        self.release.wait()
        if self.fail.is_set():
            raise OSError(5, "Input/output error")
        return self.inner.sync()

    def close(self) -> None:
        self.inner.close()


def test_a_failed_sync_fails_every_waiting_and_later_append(fileio: FileIO, any_root: str) -> None:
    path = wal_path(fileio, any_root)
    storage = wal_storage(fileio, path)
    data = encode_header(header())
    storage.create(data)
    sink = FlakySink(storage.open_sink())
    errors: list[BaseException] = []
    with GroupCommitter() as committer:
        writer = WalWriter(path, header(), sink, committer, size=len(data))

        def run(p: int) -> None:
            try:
                append(writer, p, 0)
            except WalWriteFailedError as e:
                errors.append(e)

        leader = threading.Thread(target=run, args=(1,))
        leader.start()
        assert sink.syncing.wait(10)
        followers = [threading.Thread(target=run, args=(p,)) for p in range(2, 6)]
        for f in followers:
            f.start()
        deadline = time.monotonic() + 10
        while writer.size < len(data) + 5 * 64 and time.monotonic() < deadline:
            time.sleep(0.001)  # until every follower has written and parked
        sink.fail.set()
        sink.release.set()
        for t in (leader, *followers):
            t.join(10)
        assert len(errors) == 5
        assert all("may not be durable" in str(e) and path in str(e) for e in errors)
        with pytest.raises(WalWriteFailedError):
            append(writer, 9, 0)
        writer.close()


def test_committer_counts_all_its_writers(fileio: FileIO, any_root: str) -> None:
    with GroupCommitter() as committer:
        for i in range(3):
            writer = WalWriter.create(
                fileio, wal_path(fileio, any_root, f"fg{i}"), header(f"fg{i}"), committer
            )
            append(writer, 1, 0)
            if i < 2:
                writer.seal()
        stats = committer.stats()
        assert stats.appends == 3 and stats.syncs >= 3
        assert stats.bytes == sum(
            fileio.info(wal_path(fileio, any_root, f"fg{i}")).size
            - len(encode_header(header(f"fg{i}")))
            for i in range(3)
        )


def test_object_layout_writes_one_object_per_commit(memory_root: str) -> None:
    fileio = ObjectStoreOnMemory(memory_root)
    path = wal_path(fileio, memory_root)
    with GroupCommitter() as committer:
        writer = WalWriter.create(fileio, path, header(), committer)
        threads = [
            threading.Thread(target=lambda t=t: [append(writer, t, s) for s in range(5)])
            for t in range(6)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        objects = [f.name for f in fileio.list_files(path)]
        assert objects == [f"{i:012d}.wal" for i in range(writer.stats().syncs + 1)]
        writer.seal()
    contents = recover(fileio, path).contents
    assert len(contents.frames) == 30 and contents.sealed
