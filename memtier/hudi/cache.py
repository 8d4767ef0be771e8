"""A bounded cache of decoded file-slice parts, for readers that read the same table
again and again (a client polling for fresh rows reads files that rarely change).

Entries are immutable facts: a base file's columns, footer and per-row-group key columns
never change, and a log file's decoded blocks are keyed by its path and size (a log file
only grows, by appended blocks; which blocks are visible is decided at each read; a name
is never written again after a rollback: memtier's log files of version 6 tables carry
their attempt in the write token, Hudi's their Spark task attempt), and
a file-system view is keyed by the timeline it was built from (files become visible,
replaced or cleaned only through instants).
Least recently used entries are dropped once the cached data exceeds the budget.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

import pyarrow.parquet as pq

__all__ = ["SliceCache"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def _size(value: object) -> int:
    """Bytes an entry holds: its ``nbytes`` (tables, decoded log blocks, key columns, key
    filters and file-system views tell theirs), summed over containers."""
    if isinstance(value, pq.FileMetaData):
        return 4 * value.serialized_size  # decoded, a footer takes a few times its bytes
    if isinstance(value, (list, tuple)):
        return sum(_size(v) for v in value)
    if isinstance(value, dict):
        return sum(_size(v) for v in value.values())
    nbytes = getattr(value, "nbytes", 0)
    return nbytes if isinstance(nbytes, int) else 0


class SliceCache:
    """LRU of decoded file parts, bounded in bytes; thread-safe."""

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        self._warming: deque[tuple[Hashable, Callable[[], object]]] = deque()
        self._warmer: threading.Thread | None = None

    def get(self, key: Hashable, load: Callable[[], T]) -> T:
        """The cached value of ``key``, loading (and caching) it on a miss."""
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return found[0]  # type: ignore[return-value]
            self.misses += 1
        value = load()
        size = _size(value)
        if size > self.max_bytes:
            return value
        with self._lock:
            if key not in self._entries:
                self._entries[key] = (value, size)
                self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped
        return value

    def warm(self, loads: Iterable[tuple[Hashable, Callable[[], object]]]) -> None:
        """Load these entries ahead of the reads that will want them, on this cache's
        own background thread, in order (those cached already are passed over); an entry
        that fails to load is left to the read that needs it."""
        with self._lock:
            self._warming.extend((key, load) for key, load in loads if key not in self._entries)
            if not self._warming:
                return
            if self._warmer is not None and self._warmer.is_alive():
                return
            self._warmer = threading.Thread(target=self._warm_all, name="memtier-cache-warm", daemon=True)
            self._warmer.start()

    def _warm_all(self) -> None:
        while True:
            with self._lock:
                if not self._warming:
                    self._warmer = None
                    return
                key, load = self._warming.popleft()
            try:
                self.get(key, load)
            except Exception as e:  # noqa: BLE001 - the read that needs it loads it and reports
                log.debug("warming %s failed: %s", key, e)

    @property
    def nbytes(self) -> int:
        return self._bytes
