"""How long something takes (a write's acknowledgement, a WAL sync, a flush): the latest
durations as percentiles, and all of them as a cumulative histogram for Prometheus.

A table server measures an acknowledgement inside the server, from the request being
handed to it to the acknowledgement (validation, WAL append and sync, memory); a client's
ack latency adds the transport and its own work. Comparing the two tells where a slow
acknowledgement was spent.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque

import numpy as np

__all__ = ["BUCKETS", "LatencyWindow"]

#: Histogram bucket upper bounds, seconds (the last bucket, +Inf, is implied).
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LatencyWindow:
    """The last ``size`` durations (seconds), and counts of all of them; thread-safe."""

    def __init__(self, size: int = 4096) -> None:
        self._durations: deque[float] = deque(maxlen=size)
        self._count = 0
        self._sum = 0.0
        self._buckets = [0] * (len(BUCKETS) + 1)
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        with self._lock:
            self._durations.append(seconds)
            self._count += 1
            self._sum += seconds
            self._buckets[bisect.bisect_left(BUCKETS, seconds)] += 1

    def summary(self) -> dict[str, float | int]:
        """Count of all durations so far; p50, p99 and max of the window, in milliseconds."""
        with self._lock:
            window = np.array(self._durations, dtype=np.float64)
            count = self._count
        if not len(window):
            return {"count": count, "window": 0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
        p50, p99 = np.percentile(window, [50, 99]) * 1000
        return {"count": count, "window": len(window), "p50_ms": round(float(p50), 3),
                "p99_ms": round(float(p99), 3), "max_ms": round(float(window.max()) * 1000, 3)}

    def histogram(self) -> tuple[list[tuple[str, int]], float]:
        """Every duration so far as cumulative ``(upper bound, count)`` buckets, ending with
        ``+Inf``, and their sum in seconds."""
        with self._lock:
            counts, total = list(self._buckets), self._sum
        bounds = [*(repr(b) for b in BUCKETS), "+Inf"]
        return list(zip(bounds, np.cumsum(counts).tolist(), strict=True)), total
