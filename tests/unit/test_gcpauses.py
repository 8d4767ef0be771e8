"""Garbage-collector pauses of a server process: measured, and startup objects frozen."""

from __future__ import annotations

import gc

from memtier.gcpauses import freeze_startup, watch_pauses
from memtier.latency import LatencyWindow


def test_every_collection_is_timed() -> None:
    pauses = LatencyWindow()
    watch_pauses(pauses)
    try:
        gc.collect()
        gc.collect(0)
    finally:
        gc.callbacks.pop()
    assert pauses.summary()["count"] == 2


def test_objects_alive_at_startup_leave_the_collected_generations() -> None:
    kept = [[i] for i in range(1000)]  # container objects the collector tracks
    try:
        freeze_startup()
        assert gc.get_freeze_count() >= len(kept)
        assert all(not any(o is k for o in gc.get_objects()) for k in kept[:3])
    finally:
        gc.unfreeze()
