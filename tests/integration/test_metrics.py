"""Prometheus metrics at ``/metrics``: scraped over HTTP from real table servers and a
master, they count what was written and flushed, and agree with ``status()``."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

from memtier.metrics import MetricsEndpoint, master_metrics, serve_metrics, table_server_metrics
from tests.support.inprocess import InProcessCluster
from tests.support.waiting import wait_until

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64())])


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample at ``url``: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture
def endpoints(tmp_path: Path) -> Iterator[tuple[InProcessCluster, MetricsEndpoint, MetricsEndpoint]]:
    cluster = InProcessCluster(str(tmp_path))
    server = cluster.add_server("ts-0")
    served = serve_metrics(lambda: table_server_metrics(server.status(), server.latencies()))
    master = serve_metrics(lambda: master_metrics(cluster.master.status()))
    yield cluster, served, master
    served.close()
    master.close()


def test_table_server_and_master_metrics_count_writes_reads_and_flushes(
    endpoints: tuple[InProcessCluster, MetricsEndpoint, MetricsEndpoint]
) -> None:
    cluster, served, master = endpoints
    client = cluster.client()
    client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", buckets=2)
    for start in range(0, 300, 100):
        client.write("t", pa.table({"id": range(start, start + 100), "ts": [1] * 100}, schema=SCHEMA))
    before = scrape(served.url)
    assert before[("memtier_rows_acknowledged_total", (("server", "ts-0"), ("table", "t")))] == 300
    assert before[("memtier_unflushed_rows", (("server", "ts-0"), ("table", "t")))] == 300
    assert before[("memtier_ack_seconds_count", (("server", "ts-0"),))] == 3
    assert before[("memtier_ack_seconds_bucket", (("le", "+Inf"), ("server", "ts-0")))] == 3
    assert before[("memtier_wal_sync_seconds_count", (("server", "ts-0"),))] >= 1
    assert before[("memtier_memory_budget_bytes", (("server", "ts-0"),))] == cluster.config.memory_budget
    assert before[("memtier_read_seconds_count", (("server", "ts-0"),))] == 0
    assert client.lookup("t", [7])["id"].to_pylist() == [7]
    assert client.read("t").num_rows == 300
    read = scrape(served.url)[("memtier_read_seconds_count", (("server", "ts-0"),))]
    assert read >= 2  # every read of the server's memory is timed
    client.flush("t")
    after = scrape(served.url)
    assert after[("memtier_unflushed_rows", (("server", "ts-0"), ("table", "t")))] == 0
    assert after[("memtier_flush_seconds_count", (("server", "ts-0"),))] >= 1
    for server_id, server in cluster.servers.items():  # what the master shows comes by heartbeat
        cluster.master.heartbeat(server_id, server.status(), server.bucket_memory(), life=server.life)
    seen = scrape(master.url)
    assert seen[("memtier_table_servers", ())] == 1
    assert seen[("memtier_table_unflushed_rows", (("table", "t"),))] == 0
    assert 0 <= seen[("memtier_latest_commit_age_seconds", (("table", "t"),))] < 600


@pytest.mark.slow
@pytest.mark.ray
def test_a_ray_cluster_serves_metrics_for_every_component(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    import memtier

    with memtier.start_local(str(tmp_path), table_servers=1, config={"services.workers": "0"}) as cluster:
        client = cluster.client()
        client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", buckets=1)
        client.write("t", pa.table({"id": [1, 2], "ts": [1, 1]}, schema=SCHEMA))
        wait_until(lambda: client.status()["servers"]["ts-0"]["metrics_url"], "ts-0's first heartbeat")
        status = client.status()
        assert scrape(status["metrics_url"])[("memtier_table_servers", ())] == 1
        server = status["servers"]["ts-0"]
        samples = scrape(server["metrics_url"])
        assert samples[("memtier_rows_acknowledged_total", (("server", "ts-0"), ("table", "t")))] == 2
        assert ("memtier_gc_pause_seconds_count", (("server", "ts-0"),)) in samples  # watched
