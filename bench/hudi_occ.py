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
and the ratio of p50s. On a loaded machine the two codes' flushes differ by more than
the change costs, so the added steps are also timed apart, in this process, ``--parts``
times each on a version 8 table whose timeline holds 60 instants: taking and releasing the
lock (twice per instant), writing and deleting a heartbeat file, the check of other
writers' instants at completion, and the wait for the clock to pass a new instant's time.

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

import pyarrow as pa

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


def parts(repeat: int) -> list[list[object]]:
    """p50/p99 ms of each step sharing adds to an instant, timed apart."""
    sys.path.insert(0, str(ROOT))
    from memtier.hudi.timeline import new_instant_time
    from memtier.master.master import Master

    with tempfile.TemporaryDirectory(prefix="memtier-occ-") as root:
        master = Master(root, connect=lambda *_: None)
        master.create_table("t", pa.schema([("id", pa.int64()), ("ts", pa.int64())]), "id", ordering_field="ts", buckets=2, table_version=8)
        meta = master._meta("t")
        lock, heartbeats = master._sharing("t", meta)
        for _ in range(60):
            master.abort_commit("t", master.begin_commit("t", "deltacommit", owner="bench"))
        instant = master.begin_commit("t", "deltacommit", owner="bench", file_groups=[("", "f1")])
        commits = master._commits("t")

        def lock_once() -> None:
            with lock.held():
                pass

        steps = {
            "lock taken and released": lock_once,
            "heartbeat written and deleted": lambda: (heartbeats.start("0"), heartbeats.stop("0")),
            "other writers' instants checked": lambda: master._foreign_conflicts(
                meta, commits, heartbeats, instant, "deltacommit", [("", "f1")], None),
            "clock waited past a new instant": lambda: master._wait_past(new_instant_time(None)),
        }
        seconds: dict[str, list[float]] = {name: [] for name in steps}
        for _ in range(repeat):
            for name, step in steps.items():
                start = time.perf_counter()
                step()
                seconds[name].append(time.perf_counter() - start)
    return [[name, len(runs), round(statistics.median(runs) * 1e3, 2),
             round(sorted(runs)[min(len(runs) - 1, round(0.99 * (len(runs) - 1)))] * 1e3, 2)]
            for name, runs in seconds.items()]


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
    parser.add_argument("--parts", type=int, default=300, help="times each added step is timed apart")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        flush_loop(args.flushes, args.flush_rows, args.child)
        return
    if args.baseline is None or not (args.baseline / "memtier").is_dir():
        parser.error("--baseline must name the root of a memtier checkout")
    baseline_python = args.baseline_python or str(args.baseline / ".venv" / "bin" / "python")
    sys.path.insert(0, str(ROOT))
    from bench.common import print_table, report

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
    steps = parts(args.parts)
    print_table(["added step", "times", "p50_ms", "p99_ms"], steps)
    print()
    report("hudi_occ", ["code", "flushes", "p50_ms", "p99_ms", "p50_ratio"], rows,
           {"flush_rows": args.flush_rows, "rounds": args.rounds, "steps": steps})


if __name__ == "__main__":
    main()
