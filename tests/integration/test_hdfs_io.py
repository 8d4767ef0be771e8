"""memtier's FileIO against a real HDFS (a NameNode and three DataNodes, replication 3):
publish and exclusive create, files still open read by others, lease recovery of a file a
killed process left open, Parquet through the pyarrow view."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memtier.errors import AlreadyExistsError, NotFoundError
from memtier.io import FileIO, join, open_fileio, sweep_temp_files
from tests.support.hdfs import TEST_BLOCK_SIZE, HdfsCluster

pytestmark = [pytest.mark.slow, pytest.mark.hdfs]


@pytest.fixture
def root(hdfs: HdfsCluster) -> str:
    return hdfs.url("io", uuid.uuid4().hex)


@pytest.fixture
def io(hdfs: HdfsCluster, root: str) -> FileIO:
    return open_fileio(root, hdfs.storage_options)


def test_publish_replace_list_and_delete(io: FileIO, root: str) -> None:
    path = join(root, "a", "b.bin")
    io.write_atomic(path, b"first")
    io.write_atomic(path, [b"sec", b"ond"])  # replaces (rename with OVERWRITE)
    assert io.read_bytes(path) == b"second"
    assert io.read_range(path, 1, 3) == b"eco"
    assert io.read_ranges(path, [(0, 2), (4, 10)]) == [b"se", b"nd"]
    info = io.info(path)
    assert (info.path, info.size, info.is_dir) == (path, 6, False) and info.mtime is not None
    with io.open_output(join(root, "a", "c", "d.bin")) as out:
        out.write(b"x" * (TEST_BLOCK_SIZE + 5))  # more than a block
    assert [f.path for f in io.list_files(root)] == [path, join(root, "a", "c", "d.bin")]
    assert [f.name for f in io.list_dir(join(root, "a"))] == ["b.bin", "c"]
    assert io.list_dir(join(root, "missing")) == [] and not io.exists(join(root, "missing"))
    io.rename(path, join(root, "moved", "b.bin"))
    assert io.read_bytes(join(root, "moved", "b.bin")) == b"second" and not io.exists(path)
    with pytest.raises(NotFoundError):
        io.read_bytes(path)
    io.delete(join(root, "moved", "b.bin"))
    io.delete(join(root, "moved", "b.bin"))  # missing: no error
    io.delete_dir(join(root, "a"))
    assert io.list_files(root) == []


def test_a_failed_output_publishes_nothing_and_leaves_no_temp_file(io: FileIO, root: str) -> None:
    with pytest.raises(RuntimeError), io.open_output(join(root, "f.parquet")) as out:
        out.write(b"half")
        raise RuntimeError("the writer fails")
    assert io.list_files(root) == []


@pytest.mark.parametrize("publish", ["write_atomic", "create_exclusive"])
def test_a_new_file_whose_writer_fails_is_written_again_to_a_new_temporary_file(
        io: FileIO, root: str, publish: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first writer's pipeline breaks (as when a DataNode the NameNode still counts live
    refuses the connection): the file is written again, whole, and no temporary file stays."""
    from memtier.io import hdfs

    opened: list[str] = []
    real_open = io._open_writer  # type: ignore[attr-defined]

    def open_writer(path: str, **kwargs: object) -> object:
        writer = real_open(path, **kwargs)
        opened.append(path)
        if len(opened) == 1:
            writer.abandon()  # every call of it now fails as a broken pipeline's would
        return writer

    monkeypatch.setattr(io, "_open_writer", open_writer)
    monkeypatch.setattr(hdfs, "NEW_FILE_BACKOFF_S", 0.01)
    path = join(root, "instant.json")
    getattr(io, publish)(path, b"whole")
    assert io.read_bytes(path) == b"whole"
    assert len(opened) == 2 and opened[0] != opened[1]  # two temporary files, the first deleted
    assert [f.path for f in io.list_files(root)] == [path]


def test_a_new_file_whose_every_writer_fails_is_refused_naming_hdfs_and_leaves_nothing(
        io: FileIO, root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from memtier.errors import StorageError
    from memtier.io import hdfs

    real_open = io._open_writer  # type: ignore[attr-defined]

    def broken_writer(path: str, **kwargs: object) -> object:
        writer = real_open(path, **kwargs)
        writer.abandon()
        return writer

    monkeypatch.setattr(io, "_open_writer", broken_writer)
    monkeypatch.setattr(hdfs, "NEW_FILE_BACKOFF_S", 0.01)
    with pytest.raises(StorageError, match="HDFS writer failed"):
        io.write_atomic(join(root, "instant.json"), b"whole")
    assert io.list_files(root) == []


def test_exactly_one_of_many_concurrent_exclusive_creators_wins(io: FileIO, root: str) -> None:
    """What the master's timeline and the WAL's fence markers rely on: create-if-absent is
    atomic in the NameNode (a rename without OVERWRITE), and the winner's file is whole."""
    path = join(root, "life.fence")
    won, lost = [], []
    barrier = threading.Barrier(8)

    def create(i: int) -> None:
        mine = open_fileio(root, io.storage_options)  # a client (and lease holder) of its own
        barrier.wait()
        try:
            mine.create_exclusive(path, f"creator {i} ".encode() * 1000)
            won.append(i)
        except AlreadyExistsError:
            lost.append(i)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 7
    assert io.read_bytes(path) == f"creator {won[0]} ".encode() * 1000
    assert [f.name for f in io.list_files(root)] == ["life.fence"]  # no temporary file left


@pytest.mark.parametrize("how", ["created", "appended"])
def test_a_file_open_for_appends_is_read_by_others_up_to_its_last_sync(io: FileIO, root: str, how: str) -> None:
    """hdfs-native reads a file's complete blocks only; the block being written comes
    through WebHDFS, so a reader sees every synced byte, across block boundaries too, and
    in a file reopened for append (a WAL segment: its header published, then appended to)."""
    path = join(root, "segment.stream")
    data = bytes(range(256)) * ((TEST_BLOCK_SIZE + 300_000) // 256)
    start = 144 if how == "appended" else 0
    if start:
        io.create_exclusive(path, data[:start])
    out = io.open_append(path)
    assert out.size == start
    out.writev([data[start:1000], data[1000 : TEST_BLOCK_SIZE + 1000]])
    out.sync()
    reader = open_fileio(root, io.storage_options)
    assert reader.info(path).size == TEST_BLOCK_SIZE + 1000
    assert reader.read_bytes(path) == data[: TEST_BLOCK_SIZE + 1000]
    out.write(data[TEST_BLOCK_SIZE + 1000 :])
    out.sync()
    ranges = [(10, 20), (TEST_BLOCK_SIZE - 10, 30), (len(data) - 5, 100)]  # within, across, past the end
    assert reader.read_ranges(path, ranges) == [data[10:30], data[TEST_BLOCK_SIZE - 10 : TEST_BLOCK_SIZE + 20],
                                                data[-5:]]
    out.close()
    assert reader.read_bytes(path) == data




def test_a_file_created_for_appends_holds_its_head_at_once_and_refuses_a_second_creator(io: FileIO, root: str) -> None:
    """``create_append``: the head durable and counted by the NameNode on return, the
    writer kept open (its first block never reopened by an append), a second creator
    refused with the file untouched."""
    path = join(root, "created.stream")
    out = io.create_append(path, b"head")
    reader = open_fileio(root, io.storage_options)
    assert out.size == 4 and reader.info(path).size == 4 and reader.read_bytes(path) == b"head"
    with pytest.raises(AlreadyExistsError):
        io.create_append(path, b"other")
    out.write(b"-body")
    out.sync()
    assert reader.read_ranges(path, [(0, 9)], synced=True) == [b"head-body"]
    out.close()
    assert reader.read_bytes(path) == b"head-body"

def test_a_synced_read_of_an_open_file_is_never_short_of_what_the_namenode_counts(io: FileIO, root: str) -> None:
    """The NameNode's length of a file still open is what its last hsync reported, and
    it can lag bytes the pipeline has acknowledged (here: written after the hsync, which
    reach the DataNodes in full packets). A read that is told its bytes are synced (a WAL
    reading its acknowledged frames) gets them all from the replicas, asking again while
    an answer is short (as they are at the start of a block reopened for append); a plain
    read guarantees the NameNode's count only."""
    path = join(root, "lagging.stream")
    out = io.open_append(path)
    out.write(b"a" * 100_000)
    out.sync()
    out.write(b"b" * 300_000)  # acknowledged by the pipeline, not yet counted by the NameNode
    reader = open_fileio(root, io.storage_options)
    assert reader.info(path).size == 100_000
    plain = reader.read_ranges(path, [(0, 300_000)])[0]
    assert len(plain) >= 100_000 and plain[:100_000] == b"a" * 100_000
    assert reader.read_ranges(path, [(50_000, 250_000)], synced=True) == [b"a" * 50_000 + b"b" * 200_000]
    out.close()

_DIES_WRITING = """
import sys
from memtier.io import open_fileio
io = open_fileio(sys.argv[1], {"dfs.namenode.http-address": sys.argv[2]})
out = io.open_append(sys.argv[1])
out.write(b"s" * 5000); out.sync()
out.write(b"t" * 3000); out.sync()
out.write(b"u" * 100)  # never synced
print("synced", flush=True)
sys.stdin.read()
"""


def test_a_file_a_killed_writer_left_open_is_read_then_recovered_and_taken_over(
    hdfs: HdfsCluster, io: FileIO, root: str
) -> None:
    path = join(root, "dead.stream")
    http = hdfs.storage_options["dfs.namenode.http-address"]
    writer = subprocess.Popen([sys.executable, "-c", _DIES_WRITING, path, http],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert writer.stdout is not None and writer.stdout.readline() == b"synced\n"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert io.read_bytes(path) == b"s" * 5000 + b"t" * 3000  # still leased to the dead writer
    out = io.open_append(path)  # takes the file over: lease recovery first
    assert out.size == 8000
    out.write(b"v" * 10)
    out.sync()
    out.close()
    assert io.read_bytes(path) == b"s" * 5000 + b"t" * 3000 + b"v" * 10
    io.recover_lease(path)  # a closed file: nothing to do
    io.truncate(path, 5000)
    assert io.read_bytes(path) == b"s" * 5000


def test_parquet_through_open_output_and_the_arrow_view(io: FileIO, root: str) -> None:
    table = pa.table({"id": list(range(100_000)), "v": [f"value-{i}" for i in range(100_000)]})
    path = join(root, "p", "t.parquet")
    with io.open_output(path) as out:
        pq.write_table(table, out)
    fs, native = io.arrow_fs(path)
    assert pq.read_table(native, filesystem=fs).equals(table)
    assert pq.read_table(io.open_input(path)).equals(table)


def test_temporary_files_a_crash_left_are_swept_once_old(io: FileIO, root: str) -> None:
    io.write_atomic(join(root, "kept.bin"), b"k")
    left = join(root, ".memtier-tmp-0123.tmp")
    io.open_append(left).close()
    mtime = io.info(left).mtime
    assert mtime is not None
    assert sweep_temp_files(io, root, now=mtime + 10) == []
    assert sweep_temp_files(io, root, now=mtime + 2 * 24 * 3600) == [left]
    assert [f.name for f in io.list_files(root)] == ["kept.bin"]
