"""Memory accounting of one table server against its budget.

Writes never fail for memory. Before a write is admitted the server makes room: it
evicts sealed blocks (flushed ones first: their rows are in the Hudi table; then the
oldest unflushed ones: their rows stay in the WAL and are read back when needed) and
asks for a flush. How much a write had to wait or evict is reported in its
acknowledgement: the back-pressure is explicit, never an error.
"""

from __future__ import annotations

import threading

__all__ = ["MemoryAccount"]


class MemoryAccount:
    """Bytes of record batches held in memory, with a high-water mark."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._used = 0
        self._peak = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    @property
    def peak(self) -> int:
        """The most ever held at once."""
        return self._peak

    def add(self, nbytes: int) -> None:
        with self._lock:
            self._used += nbytes
            self._peak = max(self._peak, self._used)

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._used = max(0, self._used - nbytes)

    def over(self, incoming: int = 0) -> int:
        """How many bytes must be freed for ``incoming`` more to fit the budget."""
        return max(0, self._used + incoming - self.budget)

    def pressure(self) -> float:
        return self._used / self.budget if self.budget else 0.0
