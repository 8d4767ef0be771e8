"""FileIO on local disk and memory://: atomic publish, exclusive create, appends, listing."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memtier.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError
from memtier.hudi.filenames import classify
from memtier.io import (
    ORPHAN_AGE_S,
    FileIO,
    basename,
    is_temp_file,
    join,
    open_fileio,
    parent,
    relpath,
    sweep_temp_files,
)


def test_write_atomic_replaces_and_reads_back(fileio: FileIO, any_root: str) -> None:
    path = join(any_root, "a", "b.bin")
    fileio.write_atomic(path, b"first")
    fileio.write_atomic(path, b"second")
    assert fileio.read_bytes(path) == b"second"
    assert fileio.read_range(path, 1, 3) == b"eco"
    assert fileio.info(path).size == 6
    assert [f.name for f in fileio.list_dir(join(any_root, "a"))] == ["b.bin"]


def test_create_exclusive_refuses_existing_file(fileio: FileIO, any_root: str) -> None:
    path = join(any_root, "t", "1.commit")
    fileio.create_exclusive(path, b"one")
    with pytest.raises(AlreadyExistsError, match="already exists"):
        fileio.create_exclusive(path, b"two")
    assert fileio.read_bytes(path) == b"one"


def test_a_marker_is_published_whole_and_exclusively_when_asked(fileio: FileIO, any_root: str) -> None:
    path = join(any_root, ".hoodie", "lock")
    fileio.write_marker(path, b"one", exclusive=True)
    with pytest.raises(AlreadyExistsError, match="already exists"):
        fileio.write_marker(path, b"two", exclusive=True)
    assert fileio.read_bytes(path) == b"one"
    fileio.write_marker(path, b"three")
    assert fileio.read_bytes(path) == b"three"
    assert [f.name for f in fileio.list_dir(join(any_root, ".hoodie"))] == ["lock"]  # no temporary file left


def test_pieces_are_written_in_turn_and_a_failing_one_publishes_nothing(
    fileio: FileIO, any_root: str
) -> None:
    path = join(any_root, "log", ".f_1.log.1_0-0-0")
    fileio.create_exclusive(path, (piece for piece in [b"ab", pa.py_buffer(b"cd"), memoryview(b"e")]))
    assert fileio.read_bytes(path) == b"abcde"

    def failing():
        yield b"block 1"
        raise RuntimeError("encoding block 2 failed")

    other = join(any_root, "log", ".f_1.log.2_0-0-0")
    with pytest.raises(RuntimeError, match="block 2"):
        fileio.create_exclusive(other, failing())
    assert not fileio.exists(other)
    assert not any(is_temp_file(f.name) for f in fileio.list_files(any_root))


def test_open_output_publishes_only_on_success(fileio: FileIO, any_root: str) -> None:
    path = join(any_root, "out.parquet")
    with pytest.raises(RuntimeError):
        with fileio.open_output(path) as sink:
            sink.write(b"partial")
            raise RuntimeError("writer failed")
    assert not fileio.exists(path)
    assert not any(is_temp_file(f.name) for f in fileio.list_files(any_root))
    table = pa.table({"x": [1, 2, 3]})
    with fileio.open_output(path) as sink:
        pq.write_table(table, sink)
    with fileio.open_input(path) as source:
        assert pq.read_table(source).equals(table)


def test_a_file_being_written_looks_like_no_hudi_file(fileio: FileIO, any_root: str) -> None:
    base = "00000000-0000-0000-0000-000000000000-0_0-0-0_20261125155328610.parquet"
    for name in (base, ".00000000-0000-0000-0000-000000000000-0_20261125155328610.log.1_0-0-0",
                 "20261125155328610.deltacommit"):
        with fileio.open_output(join(any_root, name)) as sink:
            sink.write(b"half")
            (temp,) = [f.name for f in fileio.list_files(any_root) if is_temp_file(f.name)]
            assert name not in temp and temp.endswith(".tmp") and ".log." not in temp
            assert classify(temp) is None
        fileio.delete(join(any_root, name))


def test_append_sync_and_truncate(fileio: FileIO, any_root: str) -> None:
    path = join(any_root, "wal", "seg")
    with fileio.open_append(path) as f:
        assert f.write(b"abc") == 3
        f.sync()
        assert f.write(memoryview(b"defg")) == 7
        f.sync()
        assert f.size == 7
    with fileio.open_append(path) as f:  # reopening appends after what is there
        assert f.size == 7
        f.write(b"h")
        f.sync()
    assert fileio.read_bytes(path) == b"abcdefgh"
    fileio.truncate(path, 5)
    assert fileio.read_bytes(path) == b"abcde"


def test_listing_is_recursive_sorted_and_tolerates_missing(fileio: FileIO, any_root: str) -> None:
    for name in ("p=2/b", "p=1/a", "p=1/c", "top"):
        fileio.write_atomic(join(any_root, name), b"x")
    files = [relpath(any_root, f.path) for f in fileio.list_files(any_root)]
    assert files == ["p=1/a", "p=1/c", "p=2/b", "top"]
    dirs = [f.name for f in fileio.list_dir(any_root) if f.is_dir]
    assert dirs == ["p=1", "p=2"]
    assert fileio.list_dir(join(any_root, "missing")) == []
    assert fileio.list_files(join(any_root, "missing")) == []


def test_delete_rename_and_missing_files(fileio: FileIO, any_root: str) -> None:
    src, dst = join(any_root, "x"), join(any_root, "d", "y")
    fileio.write_atomic(src, b"1")
    fileio.rename(src, dst)
    assert not fileio.exists(src) and fileio.read_bytes(dst) == b"1"
    fileio.delete(dst)
    fileio.delete(dst)  # missing is fine
    with pytest.raises(NotFoundError):
        fileio.read_bytes(dst)
    with pytest.raises(FileNotFoundError):  # NotFoundError is a FileNotFoundError too
        fileio.info(dst)
    fileio.delete_dir(join(any_root, "d"))
    assert not fileio.exists(join(any_root, "d"))


def test_fileio_pickles_as_its_root(fileio: FileIO, any_root: str) -> None:
    fileio.write_atomic(join(any_root, "f"), b"z")
    clone = pickle.loads(pickle.dumps(fileio))
    assert type(clone) is type(fileio) and clone.read_bytes(join(any_root, "f")) == b"z"


def test_arrow_fs_reads_the_same_files(fileio: FileIO, any_root: str) -> None:
    path = join(any_root, "t.parquet")
    with fileio.open_output(path) as sink:
        pq.write_table(pa.table({"a": ["x"]}), sink)
    fs, native = fileio.arrow_fs(path)
    assert pq.read_table(native, filesystem=fs).column("a").to_pylist() == ["x"]


def test_mmap_is_zero_copy_on_local_disk(tmp_path) -> None:
    io = open_fileio(str(tmp_path))
    io.write_atomic(str(tmp_path / "m"), b"mapped")
    assert bytes(io.mmap(str(tmp_path / "m"))) == b"mapped"
    assert open_fileio("memory://x").mmap("memory://x/none") is None


def test_path_helpers() -> None:
    assert join("s3://b/t", "p=1", "f") == "s3://b/t/p=1/f"
    assert join("/", "a") == "/a"
    assert parent("s3://b/t/p=1/f") == "s3://b/t/p=1"
    assert parent("/a/b") == "/a"
    assert relpath("memory://r", "memory://r/x/y") == "x/y"
    with pytest.raises(InvalidArgumentError, match="not below"):
        relpath("/a", "/b/c")


def test_open_fileio_rejects_bad_input() -> None:
    with pytest.raises(InvalidArgumentError, match="non-empty"):
        open_fileio("")
    with pytest.raises(InvalidArgumentError, match="do not apply"):
        open_fileio("/tmp/x", {"aws_region": "x"})
    with pytest.raises(InvalidArgumentError, match="unknown s3 storage option"):
        open_fileio("s3://bucket/x", {"colour": "blue"})
    with pytest.raises(InvalidArgumentError, match="no filesystem for scheme"):
        open_fileio("nosuchscheme://x")


def test_hdfs_uri_needs_a_name_node() -> None:
    """No HDFS server can run here: check the backend is chosen and a bad URI is refused."""
    pytest.importorskip("hdfs_native")
    from memtier.io.hdfs import HdfsFileIO

    assert isinstance(open_fileio("hdfs://namenode:8020/tables/t"), HdfsFileIO)
    with pytest.raises(InvalidArgumentError, match="names no NameNode"):
        open_fileio("hdfs:///tables/t")


def test_a_process_that_opened_hdfs_can_still_start_processes() -> None:
    """Ray starts its processes with a fork that runs Python in the child first (a
    ``preexec_fn``), where fsspec clears its cache of filesystems: an hdfs-native client
    dropped there hung the child, and the parent with it (start_local never returned)."""
    pytest.importorskip("hdfs_native")
    script = (
        "import subprocess, sys\n"
        "from memtier.io import open_fileio\n"
        "open_fileio('hdfs://namenode:8020/tables/t')\n"  # dropped: only a cache could hold it
        "subprocess.run([sys.executable, '-c', 'pass'], preexec_fn=lambda: None, check=True)\n"
        "print('started')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "started", done.stderr


def test_a_writer_killed_mid_write_leaves_a_temporary_file_that_is_swept_once_old(tmp_path) -> None:
    """A real process SIGKILLed while writing a file leaves only its temporary file (the
    file itself never appears); the sweep takes it once it is old enough, and nothing else."""
    import signal
    import subprocess
    import sys
    import time

    root = str(tmp_path)
    io = open_fileio(root)
    io.write_atomic(join(root, "p", "kept.parquet"), b"published")
    writer = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from memtier.io import open_fileio\n"
         f"writing = open_fileio({root!r}).open_output({root!r} + '/p/new.parquet')\n"
         "out = writing.__enter__()\n"
         "out.write(b'x' * 4096); out.flush(); print('writing', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    (left,) = [f.path for f in io.list_files(root) if is_temp_file(basename(f.path))]
    assert sweep_temp_files(io, root, now=time.time()) == []  # it might still be written
    assert sweep_temp_files(io, root, now=time.time() + ORPHAN_AGE_S + 60) == [left]
    assert [basename(f.path) for f in io.list_files(root)] == ["kept.parquet"]


def test_read_ranges_returns_each_range_across_read_chunks_and_short_at_the_end(
    fileio: FileIO, any_root: str
) -> None:
    from memtier.io import GENTLE_READ_BYTES

    path = join(any_root, "wal", "segment")
    data = bytes(range(256)) * (3 * GENTLE_READ_BYTES // 256 + 7)  # ranges span several chunks
    fileio.write_atomic(path, data)
    ranges = [(5, 10), (GENTLE_READ_BYTES - 3, 2 * GENTLE_READ_BYTES + 9), (0, 0), (len(data) - 4, 100)]
    assert [bytes(r) for r in fileio.read_ranges(path, ranges)] == [data[o : o + n] for o, n in ranges]
    assert fileio.read_ranges(path, [(len(data) + 10, 5)]) == [b""]
    with pytest.raises(NotFoundError):
        fileio.read_ranges(join(any_root, "wal", "missing"), [(0, 1)])


def test_a_gentle_file_reads_as_a_plain_one_across_its_read_chunks(tmp_path) -> None:
    import io

    from memtier.io import GENTLE_READ_BYTES, GentleFile

    path = tmp_path / "f.bin"
    data = bytes(range(256)) * (2 * GENTLE_READ_BYTES // 256 + 3)
    path.write_bytes(data)
    with GentleFile(str(path)) as f:
        assert f.read(10) == data[:10]
        assert f.seek(GENTLE_READ_BYTES - 5) == GENTLE_READ_BYTES - 5
        assert f.read(GENTLE_READ_BYTES + 10) == data[GENTLE_READ_BYTES - 5 : 2 * GENTLE_READ_BYTES + 5]
        assert f.seek(-7, io.SEEK_END) == len(data) - 7 and f.read() == data[-7:]
        assert f.read(5) == b"" and f.tell() == len(data)
        f.seek(3)
        assert f.readall() == data[3:]


def test_a_process_reading_gently_reads_parquet_and_whole_files_the_same(tmp_path) -> None:
    from memtier.io import read_gently

    table = pa.table({"id": range(200_000), "v": [float(i) for i in range(200_000)]})
    fileio = open_fileio(str(tmp_path))
    path = join(str(tmp_path), "base.parquet")
    pq.write_table(table, str(tmp_path / "base.parquet"), row_group_size=50_000)
    plain_bytes = fileio.read_bytes(path)
    read_gently()
    try:
        with fileio.open_input(path) as source:
            assert not isinstance(source, pa.MemoryMappedFile)
            assert pq.ParquetFile(source).read().equals(table)
        assert fileio.read_bytes(path) == plain_bytes
        with pytest.raises(NotFoundError):
            fileio.open_input(join(str(tmp_path), "missing.parquet"))
    finally:
        read_gently(False)
    with fileio.open_input(path) as source:
        assert isinstance(source, pa.MemoryMappedFile)
