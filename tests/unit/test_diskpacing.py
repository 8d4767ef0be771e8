"""Bulk files written back a window at a time and deleted a step at a time keep every byte
and leave nothing behind (how they leave the WAL's syncs alone is measured, not tested:
bench/RESULTS.md)."""

from __future__ import annotations

import os
from pathlib import Path

from memtier.diskpacing import STEP, WINDOW, PacedFile, trickle_unlink
from memtier.io import open_fileio


def test_a_paced_file_holds_exactly_what_was_written(tmp_path: Path) -> None:
    pieces = [os.urandom(n) for n in (1, WINDOW - 1, 3 * WINDOW + 7, 12345, WINDOW)]
    path = tmp_path / "f"
    with open(path, "wb") as f:
        paced = PacedFile(f)
        for piece in pieces:
            assert paced.write(piece) == len(piece)
        assert paced.tell() == sum(map(len, pieces))
    assert path.read_bytes() == b"".join(pieces)


def test_writes_through_fileio_are_paced_and_whole(tmp_path: Path) -> None:
    io = open_fileio(str(tmp_path))
    data = os.urandom(5 * WINDOW + 3)
    io.write_atomic(str(tmp_path / "a"), [data[:WINDOW + 1], data[WINDOW + 1:]])
    with io.open_output(str(tmp_path / "b")) as out:
        out.write(data)
    assert (tmp_path / "a").read_bytes() == data == (tmp_path / "b").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["a", "b"]  # no temporary file left


def test_trickle_unlink_deletes_large_small_and_missing_files(tmp_path: Path) -> None:
    large, small = tmp_path / "large", tmp_path / "small"
    large.write_bytes(b"x" * (2 * STEP + 5))
    small.write_bytes(b"y")
    fd = os.open(large, os.O_RDONLY)  # a reader that still has it open reads zeros, not garbage
    try:
        trickle_unlink(str(large))
        assert os.pread(fd, 16, STEP) in (b"\0" * 16, b"x" * 16)
    finally:
        os.close(fd)
    trickle_unlink(str(small))
    trickle_unlink(str(tmp_path / "missing"))
    assert os.listdir(tmp_path) == []
