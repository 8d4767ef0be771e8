"""The window of write acknowledgement times a table server reports."""

from __future__ import annotations

from memtier.latency import LatencyWindow


def test_an_empty_window_reports_zeros() -> None:
    assert LatencyWindow().summary() == {"count": 0, "window": 0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}


def test_percentiles_cover_the_latest_durations_only() -> None:
    window = LatencyWindow(size=100)
    for _ in range(50):
        window.add(1.0)  # pushed out by the 100 below
    for ms in range(1, 101):
        window.add(ms / 1000)
    summary = window.summary()
    assert (summary["count"], summary["window"]) == (150, 100)
    assert summary["p50_ms"] == 50.5 and summary["max_ms"] == 100.0
    assert 99 <= summary["p99_ms"] <= 100


def test_the_histogram_counts_every_duration_cumulatively() -> None:
    window = LatencyWindow(size=2)  # the histogram is not limited to the window
    for seconds in (0.0004, 0.0005, 0.003, 0.3, 30.0):
        window.add(seconds)
    buckets, total = window.histogram()
    counts = dict(buckets)
    assert counts["0.0005"] == 2  # a duration on a bound belongs to that bucket (le)
    assert counts["0.005"] == 3 and counts["0.25"] == 3 and counts["0.5"] == 4
    assert counts["10.0"] == 4 and counts["+Inf"] == 5
    assert abs(total - 30.3039) < 1e-9
