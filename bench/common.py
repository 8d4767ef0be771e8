"""Shared benchmark plumbing: the 5-column test table, timing, and the table/JSON report."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

#: Where results go; MEMTIER_BENCH_RESULTS moves them (the smoke tests write elsewhere).
RESULTS_DIR = Path(os.environ.get("MEMTIER_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")

BENCH_SCHEMA = pa.schema([
    ("key", pa.int64()),
    ("ts", pa.int64()),
    ("name", pa.string()),
    ("value", pa.float64()),
    ("count", pa.int32()),
])


def bench_table(rows: int, *, seed: int = 0, keys: np.ndarray | None = None, ts: int = 1) -> pa.Table:
    """``rows`` rows of the benchmark schema: int64 key, int64 ts, ~20-char string, double, int32."""
    rng = np.random.default_rng(seed)
    key = np.arange(rows, dtype=np.int64) if keys is None else keys
    suffix = rng.integers(0, 10**9, rows).astype(str)
    names = np.char.add("customer-name-", suffix)  # 14 + up to 9 characters
    return pa.table(
        {
            "key": key,
            "ts": np.full(rows, ts, dtype=np.int64),
            "name": pa.array(names.astype(object), pa.string()),
            "value": rng.random(rows),
            "count": rng.integers(0, 1000, rows, dtype=np.int32),
        },
        schema=BENCH_SCHEMA,
    )


def positive_seconds(text: str) -> float:
    """An argparse type: a duration in seconds above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    return value


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, list[float]]:
    """Median seconds of ``repeat`` runs of ``fn`` (and every run's time)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(name: str, header: list[str], rows: list[list[Any]], extra: dict[str, Any]) -> Path:
    """Print an aligned table and write ``bench/results/<name>.json``."""
    print_table(header, rows)
    RESULTS_DIR.mkdir(exist_ok=True)
    out = RESULTS_DIR / f"{name}.json"
    payload = {
        "benchmark": name,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "pyarrow": pa.__version__},
        "columns": header,
        "rows": rows,
        **extra,
    }
    out.write_text(json.dumps(payload, indent=2, default=str))
    print(f"\nwrote {out}")
    return out


def print_table(header: list[str], rows: list[list[Any]]) -> None:
    """Print ``rows`` under ``header``, columns aligned."""
    widths = [max(len(str(h)), *(len(_fmt(r[i])) for r in rows)) for i, h in enumerate(header)]
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(_fmt(v).ljust(w) for v, w in zip(row, widths, strict=True)))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if value < 100 else f"{value:,.0f}"
    return str(value)
