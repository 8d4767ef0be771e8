"""Recovery: torn tails cut off durably, damage refused untouched, producer marks."""

from __future__ import annotations

import pyarrow as pa
import pytest

from memtier.errors import CorruptFileError, NotAWalFileError, SchemaMismatchError
from memtier.io import FileIO
from memtier.wal import producer_high_water, read_wal, recover
from tests.support.wal import SCHEMA, producer_id, wal_path, write_wal

APPENDS = [(1, 0), (2, 5), (1, 1), (3, 0), (2, 6), (1, 2)]


def test_recover_a_clean_wal(fileio: FileIO, any_root: str) -> None:
    path = wal_path(fileio, any_root)
    write_wal(fileio, path, APPENDS, seal=True)
    recovered = recover(fileio, path, schema=SCHEMA)
    assert recovered.truncated_bytes == 0 and recovered.contents.tail == 0
    assert recovered.contents.sealed and len(recovered.contents.frames) == len(APPENDS)
    assert dict(recovered.producer_seqs) == {
        producer_id(1): 2,
        producer_id(2): 6,
        producer_id(3): 0,
    }


def test_torn_tail_is_cut_off_durably(fileio: FileIO, any_root: str) -> None:
    path = wal_path(fileio, any_root)
    locations = write_wal(fileio, path, APPENDS)
    last = locations[-1]
    fileio.truncate(path, last.offset + last.length // 2)
    recovered = recover(fileio, path)
    assert recovered.truncated_bytes == last.length // 2
    assert len(recovered.contents.frames) == len(APPENDS) - 1
    assert recovered.contents.size == last.offset == fileio.info(path).size
    assert recovered.contents.tail == 0
    assert recover(fileio, path).truncated_bytes == 0
    assert dict(recovered.producer_seqs)[producer_id(1)] == 1


def test_damage_is_refused_and_the_file_left_alone(fileio: FileIO, any_root: str) -> None:
    path = wal_path(fileio, any_root)
    locations = write_wal(fileio, path, APPENDS)
    data = bytearray(fileio.read_bytes(path))
    victim = locations[2]
    data[victim.offset + victim.length - 5] ^= 1
    fileio.write_atomic(path, bytes(data))
    with pytest.raises(CorruptFileError) as error:
        recover(fileio, path)
    assert error.value.path == path and error.value.offset == victim.offset
    assert f"corrupt at byte {victim.offset}: payload checksum mismatch" in str(error.value)
    assert fileio.read_bytes(path) == bytes(data)


def test_a_file_that_is_not_a_wal_is_not_touched(fileio: FileIO, any_root: str) -> None:
    path = wal_path(fileio, any_root)
    fileio.write_atomic(path, b"not a wal at all")
    with pytest.raises(NotAWalFileError):
        recover(fileio, path)
    assert fileio.read_bytes(path) == b"not a wal at all"


def test_schema_mismatch(fileio: FileIO, any_root: str) -> None:
    path = wal_path(fileio, any_root)
    write_wal(fileio, path, APPENDS[:1])
    with pytest.raises(SchemaMismatchError, match="'seq' is int64, expected string"):
        recover(fileio, path, schema=SCHEMA.set(1, pa.field("seq", pa.string())))


def test_producer_high_water_takes_the_maximum() -> None:
    class Frame:
        def __init__(self, p: int, s: int) -> None:
            self.producer_id, self.producer_seq = producer_id(p), s

    frames = [Frame(1, 3), Frame(1, 1), Frame(2, 0), Frame(1, 7), Frame(2, 2)]
    assert producer_high_water(frames) == {producer_id(1): 7, producer_id(2): 2}  # type: ignore[arg-type]


def test_read_does_not_cut_the_tail(fileio: FileIO, any_root: str) -> None:
    path = wal_path(fileio, any_root)
    locations = write_wal(fileio, path, APPENDS)
    fileio.truncate(path, locations[-1].end - 1)
    contents = read_wal(fileio, path)
    assert contents.tail == locations[-1].length - 1
    assert fileio.info(path).size == locations[-1].end - 1
