"""Terminal output of the ``memtier`` command: sizes, durations, aligned tables, the status
screen, and :class:`Console` for progress (steps stamped with the elapsed time, and one
live line rewritten in place on a terminal)."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

from memtier.hudi.timeline import parse_instant_time

__all__ = ["Console", "human_bytes", "human_seconds", "render_table", "request_line", "service_line",
           "status_report"]


def human_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_seconds(seconds: float) -> str:
    """``0.0021`` -> ``"2.1 ms"``, ``3.25`` -> ``"3.2 s"``, ``125`` -> ``"2 m 5 s"``."""
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} m {rest} s"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> list[str]:
    """Rows under their headers, columns padded to one width; ``right`` columns right-aligned."""
    cells = [[str(h) for h in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        return "  ".join(padded).rstrip()

    return [line(row) for row in cells]


def status_report(address: str, status: Mapping[str, Any]) -> str:
    """The human form of a master's ``status()``: table servers, tables, open transactions."""
    servers = status["servers"]
    now = time.time()
    server_rows = [
        (
            sid,
            s["location"],
            f"{s['heartbeat_age_s']:.1f} s ago",
            f"{human_bytes(s['memory_used'])} / {human_bytes(s['memory_budget'])}",
            f"{100 * s['memory_used'] / s['memory_budget']:.1f}%" if s["memory_budget"] else "-",
            _ack_times(s.get("writes") or {}),
            _ack_times(s.get("wal_syncs") or {}),
            _ack_times(s.get("flushes") or {}),
            _placement(s),
        )
        for sid, s in servers.items()
    ]
    table_rows = [
        (
            name,
            t["path"],
            t["buckets"],
            t["latest_commit"] or "(none yet)",
            _age(t["latest_commit"], now),
            f"{t['unflushed_rows']:,}",
            f"{t['lag_s']:.1f} s",
        )
        for name, t in status["tables"].items()
    ]
    txns = status["open_transactions"]
    lines = [f"memtier cluster at {address}", "", f"Table servers: {len(servers)}"]
    lines += _indent(render_table(("id", "address", "heartbeat", "memory used / budget", "used",
                                   "write ack p50 / p99", "WAL sync p50 / p99", "flush p50 / p99",
                                   "CPUs (flush worker)"),
                                  server_rows, right=(2, 3, 4, 5, 6, 7)))
    lines += ["", f"Tables: {len(table_rows)}"]
    if table_rows:
        lines += _indent(render_table(
            ("name", "path", "buckets", "latest Hudi commit", "flushed", "unflushed rows", "lag"), table_rows,
            right=(2, 4, 5, 6),
        ))
    pool = status.get("pool") or {}
    lines += ["", f"Table-service pool: {len(pool)}"] + [f"  {w} on CPUs {cpus or '?'}" for w, cpus in pool.items()]
    lines += _services_report(status["tables"])
    lines += ["", f"Open transactions: {len(txns)}" + (f" (ids {', '.join(map(str, txns))})" if txns else "")]
    endpoints = [("master", status.get("metrics_url"))] + [(sid, s.get("metrics_url")) for sid, s in servers.items()]
    served = [(who, url) for who, url in endpoints if url]
    if served:
        lines += ["", "Prometheus metrics:"] + [f"  {who}: {url}" for who, url in served]
    return "\n".join(lines)


def _placement(server: Mapping[str, Any]) -> str:
    """The CPUs a table server and its flush worker run on: ``0 (1)``."""
    cpus, flush = server.get("cpus"), server.get("flush_cpus")
    if not cpus:
        return "-"
    return f"{cpus} ({flush})" if flush else cpus


def _age(instant: str | None, now: float) -> str:
    """How long ago an instant was: the freshness of a table's latest flush."""
    if not instant:
        return "-"
    return f"{now - parse_instant_time(instant).timestamp():.1f} s ago"


def _services_report(tables: Mapping[str, Any]) -> list[str]:
    """Each table's compaction debt, reads holding leases, and pending or running services."""
    rows = []
    for name, t in tables.items():
        services = t.get("services") or {}
        debt = services.get("debt") or {}
        tasks = services.get("tasks") or []
        rows.append((
            name,
            f"{debt.get('log_files', 0):,} files, {human_bytes(debt.get('log_bytes', 0))}" if debt else "-",
            services.get("leases", 0),
            ", ".join(service_line(task) for task in tasks) or "none",
        ))
    if not rows:
        return []
    return ["", "Table services:"] + _indent(render_table(
        ("table", "compaction debt (log files waiting)", "leased reads", "pending / running"), rows, right=(2,),
    ))


def service_line(task: Mapping[str, Any]) -> str:
    """``compaction 20261122... running 3/8 (svc-0)``: one table-service task."""
    progress = f" {task['done']}/{task['total']}" if task.get("total") else ""
    worker = f" ({task['worker']})" if task.get("worker") else ""
    retry = f", attempt {task['attempts']}" if task.get("attempts", 0) > 1 else ""
    return f"{task['kind']} {task['instant']} {task['state']}{progress}{worker}{retry}"


def request_line(request: Mapping[str, Any]) -> str:
    """A manual table-service call: the task at work (or what it waits for) and how many
    of its tasks are done, ``compaction 20261122... running 3/8 (svc-0); 1/2 tasks done
    (1 joined)``."""
    tasks = request["tasks"]
    current = next((t for t in tasks if t["state"] in ("queued", "running")), None)
    if current is not None:
        head = service_line(current) + (" (joined)" if current["joined"] else "")
    elif request["state"] == "running":
        head = f"{request['kind']} waiting for writes in progress to end"
    else:
        head = f"{request['kind']} {request['state']}"
    done = sum(1 for t in tasks if t["state"] == "completed")
    joined = sum(1 for t in tasks if t["joined"])
    return f"{head}; {done}/{len(tasks)} tasks done" + (f" ({joined} joined)" if joined else "")


def _ack_times(writes: Mapping[str, Any]) -> str:
    """A server's recent write acknowledgement times, or '-' before its first write."""
    if not writes.get("window"):
        return "-"
    return f"{writes['p50_ms']:.1f} / {writes['p99_ms']:.1f} ms"


def _indent(lines: list[str]) -> list[str]:
    return ["  " + line for line in lines]


class Console:
    """Progress of a long command: ``step`` lines stamped with the elapsed time, ``task``
    for a step that takes a while, and one ``live`` line. On a terminal the live line is
    rewritten in place (``\\r``); otherwise it is printed as a plain line once a second."""

    STAMP_WIDTH = 9  # "[ 12.3s] "

    def __init__(self, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.width = shutil.get_terminal_size().columns if self.tty else 0
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self._live_width = 0
        self._last_plain: float | None = None  # when the last plain live line was printed

    def elapsed(self) -> float:
        return self._clock() - self._started

    def step(self, text: str) -> None:
        """A new step: ``[  3.2s] text`` (above the live line, which a terminal shows anew
        at its next update)."""
        if self._live_width:
            self._write("\r" + " " * self._live_width + "\r")
            self._live_width = 0
        self._write(f"{self._stamp()}{text}\n")

    def note(self, text: str = "") -> None:
        """A detail line under the current step."""
        self._write(" " * self.STAMP_WIDTH + text + "\n" if text else "\n")

    def live(self, text: str) -> None:
        """Show ``text`` as the live line: in place on a terminal, else as a plain line
        once a second (the first a second after the live line starts)."""
        line = " " * self.STAMP_WIDTH + text
        now = self._clock()
        if self.tty:
            line = self._fit(line)
            self._write("\r" + line.ljust(self._live_width))
            self._live_width = len(line)
        elif self._last_plain is None:
            self._last_plain = now
        elif now - self._last_plain >= 1.0:
            self._last_plain = now
            self._write(line + "\n")

    def end_live(self, text: str) -> None:
        """Finish the live line with its final state, which stays on screen."""
        line = " " * self.STAMP_WIDTH + text
        self._write(("\r" + self._fit(line).ljust(self._live_width) if self.tty else line) + "\n")
        self._live_width = 0
        self._last_plain = None

    @contextmanager
    def task(self, text: str) -> Iterator[None]:
        """A step that takes a while: on a terminal its line counts the seconds; then it
        says how long the step took (or that it failed)."""
        started = self._clock()
        head = f"{self._stamp()}{text} ..."
        stop = threading.Event()
        ticker = threading.Thread(target=self._tick, args=(head, started, stop), daemon=True)
        if self.tty:
            ticker.start()
        else:
            self._write(head + "\n")
        outcome = "failed"
        try:
            yield
            outcome = f"done in {human_seconds(self._clock() - started)}"
        finally:
            stop.set()
            if self.tty:
                ticker.join()
                self._write("\r" + self._fit(f"{head} {outcome}") + "\033[K\n")
            else:
                self.note(outcome)

    def _tick(self, head: str, started: float, stop: threading.Event) -> None:
        while True:
            self._write("\r" + self._fit(f"{head} {self._clock() - started:.0f} s") + "\033[K")
            if stop.wait(0.5):
                return

    def _fit(self, line: str) -> str:
        """``line`` cut to the terminal's width, so that ``\\r`` can rewrite it."""
        return line if len(line) < self.width else line[: self.width - 4] + "..."

    def _stamp(self) -> str:
        return f"[{self.elapsed():5.1f}s] ".ljust(self.STAMP_WIDTH)

    def _write(self, text: str) -> None:
        with self._lock:
            self.stream.write(text)
            self.stream.flush()
