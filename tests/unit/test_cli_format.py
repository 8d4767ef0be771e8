"""Terminal output of the ``memtier`` command: the status screen and progress lines."""

from __future__ import annotations

import io

from memtier.cli_format import Console, human_bytes, human_seconds, render_table, status_report

STATUS = {
    "servers": {
        "ts-0": {"location": "grpc://127.0.0.1:4001", "heartbeat_age_s": 0.25,
                 "memory_used": 256 << 20, "memory_budget": 1 << 30, "tables": {},
                 "writes": {"count": 40, "window": 40, "p50_ms": 1.234, "p99_ms": 7.5, "max_ms": 9.0},
                 "wal_syncs": {"count": 30, "window": 30, "p50_ms": 0.8, "p99_ms": 2.0, "max_ms": 3.0},
                 "flushes": {"count": 2, "window": 2, "p50_ms": 310.0, "p99_ms": 420.0, "max_ms": 420.0},
                 "metrics_url": "http://127.0.0.1:5001/metrics", "cpus": "0", "flush_cpus": "1"},
        "ts-1": {"location": "grpc://127.0.0.1:4002", "heartbeat_age_s": 0.5,
                 "memory_used": 0, "memory_budget": 1 << 30, "tables": {}, "writes": {"window": 0}},
    },
    "tables": {
        "orders": {"path": "/data/tables/orders", "buckets": 4, "latest_commit": "20261122121101951",
                   "unflushed_rows": 12345, "lag_s": 1.5},
        "fresh": {"path": "/data/tables/fresh", "buckets": 2, "latest_commit": None,
                  "unflushed_rows": 0, "lag_s": 0.0},
    },
    "open_transactions": [7, 9],
    "pool": {"svc-0": "1"},
    "metrics_url": "http://127.0.0.1:5000/metrics",
}


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_units() -> None:
    assert human_bytes(0) == "0 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(1 << 30) == "1.0 GiB"
    assert human_seconds(0.0021) == "2.1 ms"
    assert human_seconds(3.25) == "3.2 s"
    assert human_seconds(125) == "2 m 5 s"


def test_render_table_pads_columns_and_right_aligns_numbers() -> None:
    assert render_table(("name", "rows"), [("a", 5), ("longer", 12345)], right=(1,)) == [
        "name     rows",
        "a           5",
        "longer  12345",
    ]


def test_status_report_shows_servers_tables_and_open_transactions() -> None:
    text = status_report("grpc://127.0.0.1:4000", STATUS)
    assert text.splitlines()[0] == "memtier cluster at grpc://127.0.0.1:4000"
    server = next(line for line in text.splitlines() if "ts-0" in line)
    assert "0.2 s ago" in server and "256.0 MiB / 1.0 GiB" in server and "25.0%" in server
    assert server.split()[-14:] == "1.2 / 7.5 ms 0.8 / 2.0 ms 310.0 / 420.0 ms 0 (1)".split()
    idle = next(line for line in text.splitlines() if "ts-1" in line)
    assert idle.rstrip().endswith("-")  # no write yet
    orders = next(line for line in text.splitlines() if line.strip().startswith("orders"))
    assert "20261122121101951" in orders and "12,345" in orders and "1.5 s" in orders and "s ago" in orders
    assert "(none yet)" in next(line for line in text.splitlines() if line.strip().startswith("fresh"))
    assert "Open transactions: 2 (ids 7, 9)" in text.splitlines()
    assert text.splitlines()[text.splitlines().index("Table-service pool: 1") + 1] == "  svc-0 on CPUs 1"
    assert text.splitlines()[-3:] == ["Prometheus metrics:", "  master: http://127.0.0.1:5000/metrics",
                                      "  ts-0: http://127.0.0.1:5001/metrics"]


def test_console_off_a_terminal_prints_plain_lines_once_a_second() -> None:
    out, clock = io.StringIO(), FakeClock()
    console = Console(out, clock=clock)
    console.step("starting")
    for _ in range(9):  # 2 s of updates, 4 a second
        console.live(f"at {clock.now:.2f}")
        clock.now += 0.25
    console.end_live("final")
    clock.now = 103.0
    with console.task("flushing"):
        clock.now += 0.5
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert lines[0] == "[  0.0s] starting"
    assert [line.strip() for line in lines[1:4]] == ["at 101.00", "at 102.00", "final"]
    assert lines[4:] == ["[  3.0s] flushing ...", "         done in 500.0 ms"]
