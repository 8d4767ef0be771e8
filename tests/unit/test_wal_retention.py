"""Retention: WAL files by block state and age; only flushed, expired ones are deleted."""

from __future__ import annotations

import time
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from memtier.config import WalConfig
from memtier.io import FileIO
from memtier.wal import (
    BlockState,
    FlushedSegment,
    WalEntry,
    delete_expired,
    expired,
    list_status,
    list_wals,
    retired,
)
from tests.support.wal import header, wal_path, write_wal

DAY = 86400.0


def make_wals(fileio: FileIO, root: str) -> dict[str, str]:
    """An open, a sealed and a flushed WAL, a corrupt one, and files that are not WALs."""
    paths = {
        "open": wal_path(fileio, fileio.join(root, "t", "p=1"), "fgA", 1),
        "sealed": wal_path(fileio, fileio.join(root, "t", "p=1"), "fgA", 2),
        "flushed": wal_path(fileio, fileio.join(root, "t", "p=2"), "fgB", 3),
        "unsealed-but-claimed": wal_path(fileio, root, "fgC", 4),
        "corrupt": wal_path(fileio, root, "fgD", 5),
    }
    write_wal(fileio, paths["open"], [(1, 0)], wal_header=header("fgA", 1))
    write_wal(fileio, paths["sealed"], [(1, 0)], seal=True, wal_header=header("fgA", 2))
    write_wal(fileio, paths["flushed"], [(1, 0), (2, 0)], seal=True, wal_header=header("fgB", 3))
    write_wal(fileio, paths["unsealed-but-claimed"], [(1, 0)], wal_header=header("fgC", 4))
    fileio.write_atomic(paths["corrupt"], b"garbage")
    fileio.write_atomic(fileio.join(root, "t", "notes.txt"), b"not a wal")
    return paths


def is_flushed(entry: WalEntry) -> bool:
    return entry.name.block_id in (3, 4, 5)


def test_list_by_state_and_age(fileio: FileIO, any_root: str) -> None:
    paths = make_wals(fileio, any_root)
    now = time.time() + 3 * DAY
    statuses = {
        s.entry.path: s for s in list_status(fileio, any_root, is_flushed=is_flushed, now=now)
    }
    assert set(statuses) == set(paths.values())
    assert statuses[paths["open"]].state is BlockState.OPEN
    assert statuses[paths["sealed"]].state is BlockState.SEALED
    assert statuses[paths["flushed"]].state is BlockState.FLUSHED
    assert statuses[paths["unsealed-but-claimed"]].state is BlockState.OPEN  # never trusted
    assert statuses[paths["corrupt"]].state is BlockState.OPEN
    for status in statuses.values():
        assert timedelta(days=2.9) < status.age < timedelta(days=3.1)


def test_only_flushed_and_expired_wals_are_deleted(fileio: FileIO, any_root: str) -> None:
    paths = make_wals(fileio, any_root)
    retention = WalConfig().retention
    young = delete_expired(
        fileio, any_root, is_flushed=is_flushed, now=time.time() + 6 * DAY, retention=retention
    )
    assert young == []
    old = time.time() + 30 * DAY
    deleted = delete_expired(
        fileio, any_root, is_flushed=lambda e: True, now=old, retention=retention
    )
    assert [s.entry.path for s in deleted] == [paths["sealed"], paths["flushed"]]
    left = {e.path for e in list_wals(fileio, any_root)}
    assert left == {paths["open"], paths["unsealed-but-claimed"], paths["corrupt"]}
    assert fileio.exists(fileio.join(any_root, "t", "notes.txt"))


def test_expired_is_pure(fileio: FileIO, any_root: str) -> None:
    make_wals(fileio, any_root)
    statuses = list_status(fileio, any_root, is_flushed=is_flushed, now=time.time() + 2 * DAY)
    assert expired(statuses, timedelta(days=1)) == [
        s for s in statuses if s.state is BlockState.FLUSHED
    ]
    assert expired(statuses, timedelta(days=3)) == []


@given(
    st.lists(st.tuples(st.integers(1, 1000), st.sampled_from([0.0, 1.0, 50.0, 99.0]) | st.floats(0, 100)),
             max_size=12),  # equal closing times too
    st.floats(0, 120),
    st.one_of(st.none(), st.integers(0, 5000)),
)
def test_retired_segments_are_the_old_then_the_oldest_beyond_the_bytes(
    shapes: list[tuple[int, float]], retention_s: float, retention_bytes: int | None
) -> None:
    """Flushed stream segments go once past the retention period, and the oldest of the
    rest go while what is kept exceeds the retention bytes; no more than that."""
    now = 100.0
    segments = [FlushedSegment(f"s{i}", n, at) for i, (n, at) in enumerate(shapes)]
    doomed = retired(segments, retention_s=retention_s, retention_bytes=retention_bytes, now=now)
    kept = [s for s in segments if s not in doomed]
    assert all(now - s.closed_at < retention_s for s in kept)
    if retention_bytes is not None:
        assert sum(s.nbytes for s in kept) <= retention_bytes
    if doomed and kept:
        assert max(s.closed_at for s in doomed) <= min(s.closed_at for s in kept)  # oldest first
        last = doomed[-1]  # the last to go (they are given oldest first): it had to
        assert now - last.closed_at >= retention_s or (
            retention_bytes is not None and sum(s.nbytes for s in kept) + last.nbytes > retention_bytes
        )
