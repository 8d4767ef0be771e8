"""A clock that moves only when a test moves it (for timeouts measured by the master)."""

from __future__ import annotations


class ManualClock:
    """Seconds since the epoch, as ``time.time`` gives them, advanced by hand."""

    def __init__(self, start: float = 1_790_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
