"""The memory bound of a real table server: ingesting ten times its budget through Flight
(flushes running in its worker process meanwhile), the resident memory of the table
server and its flush worker together stays within 1.5x the budget plus their fixed
overhead, and no writer fails."""

from __future__ import annotations

import pytest

from bench.batches import make_batches
from bench.ingest import memory_bound

pytestmark = [pytest.mark.ray, pytest.mark.slow]
pytest.importorskip("ray")

BUDGET = "32MB"
#: The fixed overhead besides the two processes at rest (after their first flushes of each
#: kind): the allocators' and libraries' slack (bench/RESULTS.md, the memory bound).
SLACK = 64 << 20


def test_rss_of_table_server_and_flush_worker_stays_within_the_bound(tmp_path) -> None:
    import memtier

    cluster = memtier.start_local(str(tmp_path), table_servers=1,
                                  config={"services.workers": "0", "tableserver.memory-budget": BUDGET})
    try:
        result = memory_bound(cluster, make_batches(40, 10_000), buckets=1, threads=2, factor=10,
                              drain_s=300)
    finally:
        cluster.shutdown()
    budget = result["budget"]
    assert result["written_bytes"] >= 10 * budget  # every write acknowledged, none failed
    assert result["memory_peak"] <= budget  # the account: blocks and flush copies
    assert result["worker_max"] > 0  # the flush worker was measured
    assert result["drained"]
    assert result["rss_max"] <= 1.5 * budget + result["rss_idle"] + SLACK, result
