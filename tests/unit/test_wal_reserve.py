"""The WAL's space reserve: a write that would take the reserve is refused with an error
naming it, nothing counted; a measure of free space is reused (less what was written) only
while far from the reserve, briefly."""

from __future__ import annotations

import pytest

from memtier.errors import WalWriteFailedError
from memtier.wal.reserve import ROOMY, TRUSTED_S, SpaceReserve
from tests.support.clock import ManualClock

MIB = 1 << 20


class _Disk:
    """A file system reporting the free bytes a test sets."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.asked = 0

    def free_bytes(self, path: str) -> int | None:
        self.asked += 1
        return self.free


def _reserve(disk: _Disk, clock: ManualClock, reserved: int = MIB) -> SpaceReserve:
    return SpaceReserve(disk, "/wal", reserved, clock=clock)  # type: ignore[arg-type]


def test_a_write_that_would_take_the_reserve_is_refused_naming_it() -> None:
    disk, clock = _Disk(3 * MIB), ManualClock()
    reserve = _reserve(disk, clock)
    reserve.check(2 * MIB, "t")  # leaves exactly the reserve
    disk.free = 3 * MIB  # the write failed before it took space, say
    with pytest.raises(WalWriteFailedError, match=r"wal.reserved-bytes.*nothing was written"):
        reserve.check(2 * MIB + 1, "t")
    assert not reserve.low()
    disk.free = 2 * MIB - 1
    assert reserve.low(), "less than twice the reserve free: retained segments go"


def test_free_space_is_measured_again_near_the_reserve_and_after_a_while() -> None:
    disk, clock = _Disk(100 * MIB), ManualClock()
    reserve = _reserve(disk, clock)
    reserve.check(MIB, "t")
    reserve.check(MIB, "t")
    assert disk.asked == 1, "far from the reserve, a measure is reused"
    clock.advance(2 * TRUSTED_S)
    reserve.check(MIB, "t")
    assert disk.asked == 2, "an old measure is not"
    disk.free = 2 * MIB  # another program filled the disk meanwhile
    clock.advance(2 * TRUSTED_S)
    reserve.check(0, "t")
    with pytest.raises(WalWriteFailedError):
        reserve.check(2 * MIB - ROOMY, "t")


def test_no_reserve_asks_nothing() -> None:
    disk, clock = _Disk(0), ManualClock()
    reserve = _reserve(disk, clock, reserved=0)
    reserve.check(10 * MIB, "t")
    assert not reserve.low() and disk.asked == 0
