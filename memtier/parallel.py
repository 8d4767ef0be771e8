"""One process-wide thread pool for CPU work that releases the GIL (Parquet, Arrow
compute, numpy): reads of file slices and writes of file groups share it, so no call
pays for starting threads (which costs milliseconds on a busy machine)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["parallel_map"]

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
