"""What sharing a table with Hudi's writers costs a flush: Hudi's table lock taken around
each instant's time and completion, a heartbeat file per pending instant, the check of
other writers' instants (memtier/hudi/lock.py, heartbeat.py, memtier/master/foreign.py).

    .venv/bin/python -m bench.hudi_occ --baseline /work/main [--baseline-python PYTHON]
        [--flushes 60] [--flush-rows 2000] [--rounds 3]

The baseline is another checkout of memtier (``--baseline``: its root; run by its
``.venv``'s Python unless ``--baseline-python`` names another) from before the change;
each round runs the same flush loop once with each
code, alternating, in a child process of that checkout's Python: one in-process table
server, a version 8 table of 4 buckets, ``--flushes`` flushes of ``--flush-rows`` upserted
rows timed after 5 warm-up flushes. p50/p99 of the client's ``flush`` over all rounds,
and the ratio of p50s.

Prints the table; writes bench/results/hudi_occ.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WARM_UP = 5
ROOT = Path(__file__).resolve().parents[1]


def flush_loop(flushes: int, flush_rows: int, out: str) -> None:
    """Child: time each flush of a fresh table with the memtier of the working directory."""
    sys.path.insert(0, os.getcwd())
    from bench.common import BENCH_SCHEMA, bench_table
    from tests.support.inprocess import InProcessCluster

    with tempfile.TemporaryDirectory(prefix="memtier-occ-") as root:
        cluster = InProcessCluster(str(Path(root) / "cluster"))
        try:
            cluster.add_server("ts-0")
            client = cluster.client()
            client.create_table("t", BENCH_SCHEMA, record_key="key", ordering_field="ts", buckets=4, table_version=8)
            seconds = []
            for i in range(flushes + WARM_UP):
                client.write("t", bench_table(flush_rows, seed=i, ts=i + 1))
                start = time.perf_counter()
                assert client.flush("t")
                if i >= WARM_UP:
                    seconds.append(time.perf_counter() - start)
        finally:
            cluster.close()
    Path(out).write_text(json.dumps(seconds))


def run(code: Path, python: str, args: argparse.Namespace) -> list[float]:
    """One flush loop with the memtier checked out at ``code``, run by ``python``."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([python, str(Path(__file__).resolve()), "--child", out.name,
                        "--flushes", str(args.flushes), "--flush-rows", str(args.flush_rows)],
                       cwd=code, check=True)
        return json.loads(Path(out.name).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="root of a memtier checkout before the change")
    parser.add_argument("--baseline-python", help="the Python to run the baseline with")
    parser.add_argument("--flushes", type=int, default=60)
    parser.add_argument("--flush-rows", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        flush_loop(args.flushes, args.flush_rows, args.child)
        return
    if args.baseline is None or not (args.baseline / "memtier").is_dir():
        parser.error("--baseline must name the root of a memtier checkout")
    baseline_python = args.baseline_python or str(args.baseline / ".venv" / "bin" / "python")
    sys.path.insert(0, str(ROOT))
    from bench.common import report

    seconds: dict[str, list[float]] = {"baseline (before)": [], "sharing with Hudi's writers": []}
    for _ in range(args.rounds):
        seconds["baseline (before)"] += run(args.baseline.resolve(), baseline_python, args)
        seconds["sharing with Hudi's writers"] += run(ROOT, sys.executable, args)
    base = statistics.median(seconds["baseline (before)"])
    rows = []
    for what, runs in seconds.items():
        runs = sorted(runs)
        p50, p99 = statistics.median(runs), runs[min(len(runs) - 1, round(0.99 * (len(runs) - 1)))]
        rows.append([what, len(runs), round(p50 * 1e3, 1), round(p99 * 1e3, 1), round(p50 / base, 2)])
    report("hudi_occ", ["code", "flushes", "p50_ms", "p99_ms", "p50_ratio"], rows,
           {"flush_rows": args.flush_rows, "rounds": args.rounds})


if __name__ == "__main__":
    main()
