"""Write acknowledgement times while flushes run, with flushes in the table server's own
interpreter (``tableserver.flush-worker=inline``) against flushes in its worker process
(``process``, the default): the same paced write stream, the same flushes, alternating
rounds in one run so both modes meet the same spells of machine noise.

    .venv/bin/python -m bench.flush_offload [--rounds 3] [--seconds 10] [--rate 40] [--rows 10000]
        [--flush-every 1.0]

One table server core in this process (no Ray, no Flight: only what shares its
interpreter is measured), one table of one bucket. A writer writes ``--rate`` batches of
``--rows`` rows a second on a fixed schedule, each one synced to its WAL before it is
acknowledged; every ``--flush-every`` seconds another thread seals and flushes everything
written so far into a Hudi log file (Avro blocks, the default). An acknowledgement time is
one ``client.write`` call, as the table server sees it. ``server cpu s`` is the CPU time
this process (the table server, the writer, the flushing thread) used during the round,
``worker cpu s`` what the flush worker process used: where the flush work ran, whatever
the machine's load.

Prints a table per round and the medians per mode; writes bench/results/flush_offload.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import BENCH_SCHEMA, bench_table, cpu_seconds, print_table, report
from memtier.config import FlushWorker, TableServerConfig
from tests.support.inprocess import InProcessCluster

MODES = (FlushWorker.INLINE, FlushWorker.PROCESS)


def run(root: Path, mode: FlushWorker, args: argparse.Namespace) -> dict[str, Any]:
    """One round: a fresh master, table server and table; the write and flush times."""
    cluster = InProcessCluster(str(root), config=TableServerConfig(flush_worker=mode))
    server = cluster.add_server("ts-0")
    client = cluster.client()
    client.create_table("t", BENCH_SCHEMA, record_key="key", ordering_field="ts", buckets=1)
    batches = [bench_table(args.rows, seed=i, keys=np.arange(i * args.rows, (i + 1) * args.rows))
               for i in range(int(args.rate * args.seconds))]
    client.write("t", batches[0].slice(0, 1))
    client.flush("t")  # the table's base file; a process worker started
    acks: list[float] = []
    flushes: list[float] = []
    done = threading.Event()

    def flush() -> None:
        while not done.wait(args.flush_every):
            start = time.perf_counter()
            client.flush("t")
            flushes.append(time.perf_counter() - start)

    flusher = threading.Thread(target=flush)
    worker = server.flusher.pid
    worker_cpu = cpu_seconds(worker) if worker is not None else 0.0  # its start-up is not counted
    cpu = time.process_time()
    flusher.start()
    due = time.perf_counter()
    late = 0.0
    for batch in batches:
        due += 1.0 / args.rate
        start = time.perf_counter()
        client.write("t", batch)
        acks.append(time.perf_counter() - start)
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        else:
            late = max(late, -wait)
    done.set()
    flusher.join()
    cpu = time.process_time() - cpu
    worker_cpu = cpu_seconds(worker) - worker_cpu if worker is not None else 0.0
    cluster.close()
    ms = np.asarray(acks) * 1000
    return {"mode": mode.value, "writes": len(acks), "ack_p50_ms": round(float(np.percentile(ms, 50)), 2),
            "ack_p99_ms": round(float(np.percentile(ms, 99)), 2), "ack_max_ms": round(float(ms.max()), 2),
            "late_max_ms": round(late * 1000, 1), "flushes": len(flushes),
            "flush_mean_s": round(statistics.mean(flushes), 3) if flushes else None,
            "server_cpu_s": round(cpu, 2), "worker_cpu_s": round(worker_cpu, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per mode, alternating")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=40.0, help="batches a second")
    parser.add_argument("--rows", type=int, default=10_000, help="rows a batch")
    parser.add_argument("--flush-every", type=float, default=1.0)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="memtier-bench-flush-"))
    load = os.getloadavg()
    results = []
    try:
        for round_ in range(args.rounds):
            for mode in MODES:
                results.append({"round": round_, **run(root / f"{mode.value}-{round_}", mode, args)})
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    header = ["mode", "round", "writes", "ack p50 ms", "ack p99 ms", "ack max ms", "late max ms", "flushes",
              "flush mean s", "server cpu s", "worker cpu s"]
    keys = ["mode", "round", "writes", "ack_p50_ms", "ack_p99_ms", "ack_max_ms", "late_max_ms", "flushes",
            "flush_mean_s", "server_cpu_s", "worker_cpu_s"]
    print_table(header, [[r[k] for k in keys] for r in results])
    print(f"\n{args.rate:g} batches/s of {args.rows:,} rows for {args.seconds:g} s, a flush every "
          f"{args.flush_every:g} s; load average before {load[0]:.2f}, after {os.getloadavg()[0]:.2f}\n")
    medians = [[mode.value, *(statistics.median(r[k] for r in results if r["mode"] == mode.value)
                              for k in ("ack_p50_ms", "ack_p99_ms", "ack_max_ms", "server_cpu_s", "worker_cpu_s"))]
               for mode in MODES]
    report("flush_offload", ["mode (median of rounds)", "ack p50 ms", "ack p99 ms", "ack max ms", "server cpu s",
                             "worker cpu s"], medians,
           {"rate": args.rate, "rows": args.rows, "seconds": args.seconds, "flush_every": args.flush_every,
            "rounds": args.rounds, "loadavg_before": load, "results": results})


if __name__ == "__main__":
    main()
