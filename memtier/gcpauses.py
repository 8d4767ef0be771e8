"""Python's garbage collector in a long-running server process: its pauses measured, and
the objects that live as long as the process kept out of its full collections.

A full collection walks every tracked object of the process while holding the GIL: in a
table server (Ray, Arrow, Flight and memtier loaded: ~100,000 objects) that is a pause of
tens of milliseconds in which no write is acknowledged, and it comes back whenever the
objects of held blocks have grown by a quarter. :func:`freeze_startup` moves the objects
made while the process started into the permanent generation, so later collections walk
only what came after (bench/RESULTS.md has the measurements).
"""

from __future__ import annotations

import gc
import time
from typing import Any

import numpy as np
import pyarrow as pa

from memtier.latency import LatencyWindow

__all__ = ["freeze_startup", "watch_pauses"]


def watch_pauses(pauses: LatencyWindow) -> None:
    """Add the duration of every garbage collection of this process to ``pauses``."""
    started = [0.0]

    def timed(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":  # collections run one at a time, under the GIL
            started[0] = time.perf_counter()
        else:
            pauses.add(time.perf_counter() - started[0])

    gc.callbacks.append(timed)


def freeze_startup() -> None:
    """Load what pyarrow imports only on first use (pandas, at the first ``pa.array`` of a
    numpy array: otherwise during the first write, whose acknowledgement it delayed by
    ~0.7 s, and after the freeze), collect once, then keep every object alive now out of
    later collections."""
    pa.array(np.zeros(1, dtype=bool))
    gc.collect()
    gc.freeze()
