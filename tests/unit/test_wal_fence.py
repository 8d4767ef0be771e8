"""WAL fences: the marker a fenced writer looks for, and the bounds recovery reads by."""

from __future__ import annotations

import pytest

from memtier.errors import CorruptFileError, InvalidArgumentError, UnknownFormatVersionError
from memtier.io import FileIO, join
from memtier.wal.fence import Bounds, fence, fence_path, is_fenced, life_of, new_life, read_bounds

LIFE = "0123456789abcdef"
OTHER = "fedcba9876543210"


def segment(io: FileIO, directory: str, life: str, seq: int, size: int) -> str:
    name = f"{life}{'0' * 16}.{seq:016x}.stream"
    io.write_atomic(join(directory, name), b"x" * size)
    return name


def test_a_life_names_the_segments_it_writes() -> None:
    life = new_life()
    assert len(life) == 16 and int(life, 16) >= 0 and new_life() != life
    assert life_of(f"{LIFE}{'a' * 16}.0000000000000003.stream") == LIFE
    assert life_of("not-a-segment") is None and life_of(f"{LIFE}.fence") is None


def test_fencing_marks_the_life_and_bounds_its_segments_as_they_are(fileio: FileIO, any_root: str) -> None:
    directory = join(any_root, "t", "_memtier_streams")
    mine = segment(fileio, directory, LIFE, 0, 100)
    segment(fileio, directory, OTHER, 0, 50)  # another life's: not bounded
    assert not is_fenced(fileio, directory, LIFE)
    bounds = fence(fileio, directory, LIFE, server="ts-0", by="ts-1")
    assert is_fenced(fileio, directory, LIFE) and not is_fenced(fileio, directory, OTHER)
    assert dict(bounds.segments) == {mine: 100} and (bounds.server, bounds.fenced_by) == ("ts-0", "ts-1")
    fileio.write_atomic(join(directory, mine), b"x" * 140)  # the fenced writer appended later
    segment(fileio, directory, LIFE, 1, 10)  # and began a segment
    again = fence(fileio, directory, LIFE, server="ts-0", by="ts-2")  # a second fencer
    assert dict(again.segments) == {mine: 100} and again.fenced_by == "ts-1"  # the first one's bounds
    assert {life: dict(b.segments) for life, b in read_bounds(fileio, directory).items()} == {LIFE: {mine: 100}}


def test_a_fence_whose_maker_died_before_the_bounds_is_completed_by_its_next_reader(
    fileio: FileIO, any_root: str
) -> None:
    directory = join(any_root, "t", "_memtier_streams")
    mine = segment(fileio, directory, LIFE, 0, 70)
    fileio.create_exclusive(fence_path(directory, LIFE), Bounds(LIFE, "ts-0", "ts-1").to_json())
    assert {life: dict(b.segments) for life, b in read_bounds(fileio, directory).items()} == {LIFE: {mine: 70}}


def test_bounds_round_trip_and_damaged_ones_are_refused_naming_the_file() -> None:
    bounds = Bounds(LIFE, "ts-0", "ts-1", {"a.stream": 3}, 12)
    assert Bounds.from_json(bounds.to_json(), "/f") == bounds
    with pytest.raises(CorruptFileError, match="/f"):
        Bounds.from_json(b"{", "/f")
    with pytest.raises(CorruptFileError, match="missing or mangles"):
        Bounds.from_json(bounds.to_json().replace(LIFE.encode(), b"not-a-life"), "/f")
    with pytest.raises(UnknownFormatVersionError, match="WAL fence version 2"):
        Bounds.from_json(bounds.to_json().replace(b'"version": 1', b'"version": 2'), "/f")
    with pytest.raises(InvalidArgumentError, match="not a table server life"):
        fence_path("/d", "../../etc")
