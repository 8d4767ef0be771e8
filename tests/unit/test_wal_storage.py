"""WAL file names and layouts: one appendable file, or one object per commit."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memtier.errors import CorruptFileError, InvalidArgumentError, NotFoundError
from memtier.io import AppendFile, join, open_fileio
from memtier.wal.storage import DROP_CACHE_BYTES, ObjectStorage, WalFileName, _FileSink, list_wals
from tests.support.wal import ObjectStoreOnMemory


@given(
    st.text(st.characters(blacklist_characters="/\x00"), min_size=1).filter(
        lambda s: not s.startswith(".")
    ),
    st.integers(0, 2**64 - 1),
)
def test_name_round_trips(file_group: str, block_id: int) -> None:
    name = WalFileName(file_group, block_id)
    assert WalFileName.parse(name.name) == name
    assert WalFileName.parse(name.name).name == name.name  # type: ignore[union-attr]


def test_name_format() -> None:
    assert WalFileName("8ea5c1b4-8f3e-0", 255).name == "8ea5c1b4-8f3e-0.00000000000000ff.wal"
    assert WalFileName.parse("a.b.000000000000000a.wal") == WalFileName("a.b", 10)


@pytest.mark.parametrize(
    "name",
    [
        "fg.wal",
        "fg.00000000000000FF.wal",
        "fg.0ff.wal",
        "000000000000.wal",
        ".fg.0000000000000001.wal",
        ".memtier-tmp-1234-fg.0000000000000001.wal",
        "fg.0000000000000001.log",
    ],
)
def test_not_wal_names(name: str) -> None:
    assert WalFileName.parse(name) is None


@pytest.mark.parametrize(
    ("file_group", "block_id"), [("", 1), ("a/b", 1), (".hidden", 1), ("fg", -1), ("fg", 2**64)]
)
def test_invalid_names(file_group: str, block_id: int) -> None:
    with pytest.raises(InvalidArgumentError):
        WalFileName(file_group, block_id)


class RecordingFile(AppendFile):
    """An AppendFile that records what the sink asks of it."""

    def __init__(self) -> None:
        self.path = "recording"
        self._size = 0
        self.drops: list[int] = []

    def write(self, data: bytes | memoryview) -> int:
        self._size += len(data)
        return self._size

    def writev(self, parts: Sequence[bytes | memoryview]) -> int:
        return sum(self.write(p) for p in parts) and self._size

    def sync(self) -> None:
        pass

    def drop_cache(self, length: int) -> None:
        self.drops.append(length)

    def close(self) -> None:
        pass

    @property
    def size(self) -> int:
        return self._size


def test_file_sink_writes_any_number_of_buffers(tmp_path: Path) -> None:
    path = str(tmp_path / "many")
    sink = _FileSink(open_fileio(str(tmp_path)).open_append(path))
    parts = [bytes([i % 256]) * (i % 7) for i in range(5000)]  # more than IOV_MAX, some empty
    sink.write(parts)
    sink.sync()
    sink.close()
    assert open_fileio(str(tmp_path)).read_bytes(path) == b"".join(parts)


def test_file_sink_drops_synced_pages_one_sync_behind() -> None:
    file = RecordingFile()
    sink = _FileSink(file)
    ends = []
    for _ in range(12):
        sink.write([bytes(DROP_CACHE_BYTES // 4)])
        sink.sync()
        ends.append(file.size)
    # Once 4 MiB have piled up, up to the end of the sync before the newest one.
    assert file.drops == [ends[3], ends[7]]


def test_object_storage_reads_truncates_and_lists(memory_root: str) -> None:
    fileio = ObjectStoreOnMemory(memory_root)
    path = join(memory_root, "wal", WalFileName("fg", 3).name)
    storage = ObjectStorage(fileio, path)
    storage.create(b"head")
    sink = storage.open_sink()
    assert sink.sync() is False  # nothing written: no object
    for part in (b"one", b"two", b"three"):
        sink.write([part])
        assert sink.sync() is True
    assert storage.read().to_pybytes() == b"headonetwothree"
    assert storage.read_range(5, 7) == b"netwoth"
    assert [r.to_pybytes() for r in storage.read_ranges([(5, 7), (0, 4), (12, 10), (20, 3)])] == [
        b"netwoth", b"head", b"ree", b""]
    assert storage.size() == 15
    storage.truncate(9)
    assert storage.read().to_pybytes() == b"headonetw"
    assert [f.name for f in fileio.list_files(path)] == [
        "000000000000.wal",
        "000000000001.wal",
        "000000000002.wal",
    ]
    assert [(e.path, e.name, e.size) for e in list_wals(fileio, memory_root)] == [
        (path, WalFileName("fg", 3), 9)
    ]
    assert storage.open_sink() is not None
    fileio.delete(join(path, "000000000001.wal"))
    with pytest.raises(CorruptFileError, match=r"object 000000000001\.wal is missing"):
        storage.read()
    storage.delete()
    with pytest.raises(NotFoundError):
        storage.read()
