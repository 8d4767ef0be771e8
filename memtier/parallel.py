"""One process-wide thread pool for CPU work that releases the GIL (Parquet, Arrow
compute, numpy): reads of file slices and writes of file groups share it, so no call
pays for starting threads (which costs milliseconds on a busy machine)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

__all__ = ["Prefetch", "parallel_map"]

T = TypeVar("T")
R = TypeVar("R")

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()
_workers = threading.local()


def _mark_worker() -> None:
    _workers.inside = True


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max(2, os.cpu_count() or 1), thread_name_prefix="memtier-cpu", initializer=_mark_worker
            )
        return _pool


def parallel_map(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[fn(x) for x in items]``, in parallel threads; in order. Runs inline for one
    item, and when called from a pool thread (so nested calls cannot deadlock)."""
    work = list(items)
    if len(work) <= 1 or getattr(_workers, "inside", False):
        return [fn(x) for x in work]
    return list(_executor().map(fn, work))


class Prefetch(Generic[R]):
    """A call whose result is needed later: :meth:`start` runs it on ``pool`` while the
    caller does other work (e.g. a read's call to the table servers while it reads the
    files); :meth:`result` waits for it, or runs it in the caller's thread when it was not
    started (nothing else to overlap: a thread hop would only cost)."""

    def __init__(self, call: Callable[[], R], pool: ThreadPoolExecutor) -> None:
        self._call = call
        self._pool = pool
        self._future: Future[R] | None = None

    def start(self) -> None:
        if self._future is None:
            self._future = self._pool.submit(self._call)

    def result(self) -> R:
        return self._future.result() if self._future is not None else self._call()
