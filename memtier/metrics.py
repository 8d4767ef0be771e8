"""Prometheus metrics of a table server and of the master, served at ``/metrics``.

Nothing is counted twice: the metrics are read, at each scrape, from the same status the
``memtier status`` command shows (and from the duration histograms each component keeps),
so the two always agree.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from memtier.hudi.timeline import parse_instant_time
from memtier.latency import LatencyWindow

if TYPE_CHECKING:
    from memtier.rpc.tls import ServerIdentity

__all__ = ["MetricsEndpoint", "master_metrics", "serve_metrics", "table_server_metrics"]

_HISTOGRAMS = {  # latency name -> (metric, help)
    "ack": ("memtier_ack_seconds", "time from a write reaching the table server to its acknowledgement"),
    "read": ("memtier_read_seconds", "one read of a table server's unflushed rows, inside the table server"),
    "wal_sync": ("memtier_wal_sync_seconds", "one durable WAL sync (a group commit)"),
    "flush": ("memtier_flush_seconds", "one flush commit (encoding, files, deltacommit)"),
    "gc": ("memtier_gc_pause_seconds", "one garbage collection of the table server's Python process"),
}


def table_server_metrics(status: Mapping[str, Any], latencies: Mapping[str, LatencyWindow]) -> Iterator[Metric]:
    """A table server's metrics: its status (``TableServer.status()``) and latencies."""
    server = status["server_id"]
    for name, window in latencies.items():
        metric, help_text = _HISTOGRAMS[name]
        family = HistogramMetricFamily(metric, help_text, labels=["server"])
        buckets, total = window.histogram()
        family.add_metric([server], buckets, total)
        yield family
    for metric, key, help_text in (
        ("memtier_memory_used_bytes", "memory_used", "bytes of blocks held in memory"),
        ("memtier_memory_budget_bytes", "memory_budget", "the table server's memory budget"),
        ("memtier_memory_peak_bytes", "memory_peak", "the most memory held at once"),
    ):
        yield _gauge(metric, help_text, ["server"], [([server], status[key])])
    tables = status.get("tables", {})
    per_table: list[tuple[str, str, str, type[Metric]]] = [
        ("memtier_rows_acknowledged", "acknowledged_rows", "rows acknowledged", CounterMetricFamily),
        ("memtier_bytes_acknowledged", "acknowledged_bytes", "Arrow bytes acknowledged", CounterMetricFamily),
        ("memtier_unflushed_rows", "unflushed_rows", "acknowledged rows not yet in Hudi files", GaugeMetricFamily),
        ("memtier_unflushed_bytes", "unflushed_bytes", "acknowledged bytes not yet in Hudi files",
         GaugeMetricFamily),
        ("memtier_ack_to_flush_lag_seconds", "oldest_unflushed_s",
         "age of the oldest acknowledged row not yet flushed", GaugeMetricFamily),
    ]
    for metric, key, help_text, kind in per_table:
        family = kind(metric, help_text, labels=["server", "table"])
        for table, info in sorted(tables.items()):
            family.add_metric([server, table], info.get(key, 0))
        yield family


def master_metrics(status: Mapping[str, Any], now: float | None = None) -> Iterator[Metric]:
    """The master's metrics, from ``Master.status()``: servers, transactions, and per
    table the freshness of its latest flush and its compaction debt."""
    now = time.time() if now is None else now
    yield _gauge("memtier_table_servers", "registered table servers", [], [([], len(status["servers"]))])
    yield _gauge("memtier_open_transactions", "transactions begun and not yet resolved", [],
                 [([], len(status["open_transactions"]))])
    tables = sorted(status["tables"].items())
    yield _gauge("memtier_latest_commit_age_seconds", "time since the table's latest completed commit",
                 ["table"], [([t], now - parse_instant_time(i["latest_commit"]).timestamp())
                             for t, i in tables if i.get("latest_commit")])
    yield _gauge("memtier_table_unflushed_rows", "acknowledged rows of the table not yet in Hudi files",
                 ["table"], [([t], i.get("unflushed_rows", 0)) for t, i in tables])
    yield _gauge("memtier_table_lag_seconds", "age of the table's oldest acknowledged row not yet flushed",
                 ["table"], [([t], i.get("lag_s", 0.0)) for t, i in tables])
    debts = [(t, (i.get("services") or {}).get("debt") or {}) for t, i in tables]
    yield _gauge("memtier_compaction_debt_log_bytes", "log-file bytes waiting for compaction", ["table"],
                 [([t], d.get("log_bytes", 0)) for t, d in debts])
    yield _gauge("memtier_compaction_debt_log_files", "log files waiting for compaction", ["table"],
                 [([t], d.get("log_files", 0)) for t, d in debts])


def _gauge(name: str, help_text: str, labels: list[str], values: Iterable[tuple[list[str], float]]) -> Metric:
    family = GaugeMetricFamily(name, help_text, labels=labels)
    for label_values, value in values:
        family.add_metric(label_values, value)
    return family


@dataclass
class MetricsEndpoint:
    """A running ``/metrics`` HTTP endpoint."""

    url: str
    _server: Any

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Collector:
    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        return list(self._collect())


def serve_metrics(
    collect: Callable[[], Iterable[Metric]], host: str = "127.0.0.1", port: int = 0,
    tls: ServerIdentity | None = None, advertise: str | None = None,
) -> MetricsEndpoint:
    """Serve ``collect()``'s metrics at ``http://host:port/metrics`` (port 0: any free one;
    ``https://`` with the server's certificate and key, given ``tls``; the URL names
    ``advertise`` when ``host`` is a wildcard)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(collect))  # type: ignore[arg-type]
    files = {} if tls is None else {"certfile": tls.certificate, "keyfile": tls.key}
    server, _thread = start_http_server(port, addr=host, registry=registry, **files)
    scheme = "http" if tls is None else "https"
    return MetricsEndpoint(f"{scheme}://{advertise or host}:{server.server_port}/metrics", server)
