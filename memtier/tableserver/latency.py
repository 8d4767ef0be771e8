"""How long a table server takes to acknowledge writes: the latest ones, as percentiles.

The time is measured inside the server, from the request being handed to it to the
acknowledgement (validation, WAL append and sync, memory); a client's ack latency adds the
transport and its own work. Comparing the two tells where a slow acknowledgement was spent.
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

__all__ = ["LatencyWindow"]


class LatencyWindow:
    """The last ``size`` durations (seconds); thread-safe."""

    def __init__(self, size: int = 4096) -> None:
        self._durations: deque[float] = deque(maxlen=size)
        self._count = 0
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        with self._lock:
            self._durations.append(seconds)
            self._count += 1

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
