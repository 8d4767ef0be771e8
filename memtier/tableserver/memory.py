"""Memory accounting of one table server against its budget.

Writes never fail for memory. Before a write is admitted the server makes room: it
evicts sealed blocks (flushed ones first: their rows are in the Hudi table; then the
oldest unflushed ones: their rows stay in the WAL and are read back when needed) and
asks for a flush. How much a write had to wait or evict is reported in its
acknowledgement: the back-pressure is explicit, never an error. A flush's transient copies
count against the budget while it runs.

So that the process's resident memory follows the account, a table-server process starts
with :data:`PROCESS_ENV` and calls :func:`return_freed_memory`: Arrow allocates from
jemalloc, which then hands freed pages back to the system at once (mimalloc, Arrow's
default, kept ~250 MB of freed flush buffers at a 64 MB budget), and glibc's malloc (numpy,
Python) keeps two arenas and maps blocks over 1 MiB on their own, so freeing them returns
them (its growing mmap threshold otherwise keeps them in the heap), while a write's smaller
temporaries reuse heap memory (at 128 KiB a 16-bucket write mapped and faulted in ~270
more pages: 422 page faults a write instead of 153), and the heap keeps at most 16 MiB
free at its top. A write's WAL payloads, alive only until written, come from mimalloc
(:func:`~memtier.wal.format.frame_payload`): it keeps their few freed megabytes for the
next write, where jemalloc would fault their pages in anew each time. bench/RESULTS.md has
the numbers.
"""

from __future__ import annotations

import threading

import pyarrow as pa

__all__ = ["PROCESS_ENV", "MemoryAccount", "return_freed_memory"]

#: Environment variables a table-server process must start with (read at process start).
PROCESS_ENV = {
    "ARROW_DEFAULT_MEMORY_POOL": "jemalloc",
    "MALLOC_ARENA_MAX": "2",
    "MALLOC_MMAP_THRESHOLD_": str(1 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(16 << 20),
}


def return_freed_memory() -> None:
    """Make Arrow's jemalloc give freed pages back to the system at once (no decay)."""
    try:
        pa.jemalloc_set_decay_ms(0)
    except NotImplementedError:  # a pyarrow built without jemalloc: its default pool stays
        pass


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
