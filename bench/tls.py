"""Ingest and ack latency with TLS on every connection, against the same run without it.

    .venv/bin/python -m bench.tls [--dir DIR] [--batches 200] [--rows-per-batch 10000]
        [--threads 4] [--buckets 1,4] [--rounds 3] [--paced-seconds 10]

Two clusters on one Ray runtime, each a master and one table server, no table-service
pool, default config otherwise (every write synced; blocks sealed after 64 MB or 5 s,
flushed every 2 s): ``plain`` serves ``grpc://``, ``tls`` the same with
``cluster.tls.*`` (a CA and certificate from ``memtier tls-init``'s code, ECDSA P-256),
both with a token. The same batches (``bench.batches.make_batches``) go through the client
as in ``bench.ingest``:

1. full speed: a new table of each bucket count written by 1 and ``--threads`` client
   threads, every write waited for; rounds go round-robin over the cells, plain and tls
   side by side, so both see the same spells of noise; each cell keeps its median run by
   rows/s. ``tls/plain`` divides the tls cell's rows/s by the plain one's;
2. paced: 1 client thread, 1 bucket, at half the plain cluster's best 1-thread rate for
   ``--paced-seconds`` (batches due on a fixed schedule, blocks sealing and flushing
   meanwhile), plain then tls, twice: ack latency p50/p99;
3. interleaved: ``--pairs`` single writes to each cluster (1 client thread, 1 bucket),
   plain and tls in turn (which goes first alternating), a pair every ``--pair-interval``
   seconds: both arms meet the same spells of noise, so the p99s compare TLS alone,
   where runs 1 and 2 compare spells of the machine as much. Ack latency p50/p90/p99/max
   of each arm, and of the difference within each pair.

Prints both tables; writes bench/results/tls.json. Nothing is asserted: the targets
(tls >= 0.8x plain rows/s, ack p99 within 1 ms of plain) are read off the tables.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.batches import make_batches
from bench.ceiling import median_run, scratch_dir
from bench.common import positive_seconds, print_table, report
from bench.ingest import Memtier, memtier_cells, paced
from memtier.certificates import make_certificates
from memtier.cluster import start, start_local

HEADER = ["cluster", "buckets", "threads", "batches", "rows/s", "MB/s", "tls/plain", "ack p50 ms", "ack p99 ms",
          "ts cpu ms"]
INTERLEAVED_HEADER = ["interleaved", "writes", "ack p50 ms", "ack p90 ms", "ack p99 ms", "ack max ms"]
PACED_HEADER = ["paced", "run", "target rows/s", "rows/s", "writes", "ack p50 ms", "ack p99 ms", "late max ms",
                "ts cpu ms"]
BASE = {"services.workers": "0", "cluster.token": "bench-tls-token"}


def ratios(cells: list[dict[str, Any]]) -> list[list[Any]]:
    """The full-speed table: each tls cell beside the plain one of the same buckets and threads."""
    plain = {(c["buckets"], c["threads"]): c["rows_per_s"] for c in cells if c["system"] == "plain"}
    return [[c["system"], c["buckets"], c["threads"], c["batches"], c["rows_per_s"], c["mb_per_s"],
             round(c["rows_per_s"] / plain[(c["buckets"], c["threads"])], 3) if c["system"] == "tls" else "-",
             c["ack_p50_ms"], c["ack_p99_ms"], c["ts_cpu_ms"]] for c in cells]


def interleaved(plain: Memtier, tls: Memtier, batches: Sequence[pa.RecordBatch], pairs: int,
                interval: float) -> list[dict[str, Any]]:
    """Part 3 of the module's docstring: each arm's ack latencies, and tls minus plain per pair."""
    acks: dict[str, list[float]] = {"plain": [], "tls": []}
    with plain.table(batches[0].schema, 1) as plain_table, tls.table(batches[0].schema, 1) as tls_table:
        arms = [(plain, plain_table), (tls, tls_table)]
        for memtier, table in arms:  # warm-up (routing, streams, a first TLS handshake): untimed
            memtier.clients[0].write(table, batches[0].slice(0, 1))
        origin = time.monotonic()
        for i in range(pairs):
            wait = origin + i * interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            for memtier, table in arms if i % 2 == 0 else arms[::-1]:
                begin = time.monotonic()
                memtier.clients[0].write(table, batches[i % len(batches)])
                acks[memtier.name].append(time.monotonic() - begin)
    differences = np.asarray(acks["tls"]) - np.asarray(acks["plain"])
    return [_latencies(name, np.asarray(values)) for name, values in
            [*acks.items(), ("tls - plain, per pair", differences)]]


def _latencies(name: str, seconds: np.ndarray) -> dict[str, Any]:
    ms = seconds * 1000.0
    return {"system": name, "writes": len(ms), **{f"ack_p{q}_ms": round(float(np.percentile(ms, q)), 2)
                                                  for q in (50, 90, 99)},
            "ack_max_ms": round(float(ms.max()), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=None,
                        help="where everything is written (default: a temporary directory under /tmp, removed after)")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rows-per-batch", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--buckets", default="1,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--paced-seconds", type=positive_seconds, default=10.0)
    parser.add_argument("--pairs", type=int, default=1000, help="writes to each cluster in part 3")
    parser.add_argument("--pair-interval", type=positive_seconds, default=0.05,
                        help="seconds between the pairs of part 3")
    args = parser.parse_args()
    batches = make_batches(args.batches, args.rows_per_batch)
    buckets = [int(b) for b in args.buckets.split(",")]
    load_before = os.getloadavg()
    with scratch_dir(args.dir) as root:
        pki = make_certificates(str(root / "pki"))
        with start_local(str(root / "plain"), table_servers=1, config=BASE) as plain_cluster:
            tls_cluster = start(str(root / "tls"), table_servers=1, config={**BASE, **pki.settings()})
            plain = Memtier("plain", plain_cluster, args.threads)
            tls = Memtier("tls", tls_cluster, args.threads)
            cells = [cell for pair in zip(memtier_cells(plain, batches, buckets, args.threads),
                                          memtier_cells(tls, batches, buckets, args.threads), strict=True)
                     for cell in pair]
            runs: list[list[dict[str, Any]]] = [[] for _ in cells]
            for r in range(args.rounds):
                for cell, cell_runs in zip(cells, runs, strict=True):
                    cell_runs.append(cell(r))
            results = [median_run(cell_runs) for cell_runs in runs]
            best = max((c for c in results if c["system"] == "plain" and c["threads"] == 1 and c["buckets"] == 1),
                       key=lambda c: c["rows_per_s"])
            pace = [{**paced(m, batches, best, args.paced_seconds), "run": run}
                    for run in (1, 2) for m in (plain, tls)]
            paired = interleaved(plain, tls, batches, args.pairs, args.pair_interval)
    for cell in results:
        cell.pop("acks", None)
    print_table(PACED_HEADER, [[p["system"], p["run"], p["target_rows_per_s"], p["rows_per_s"], p["writes"],
                                p["ack_p50_ms"], p["ack_p99_ms"], p["late_max_ms"], p["ts_cpu_ms"]] for p in pace])
    print()
    print_table(INTERLEAVED_HEADER, [[p["system"], p["writes"], p["ack_p50_ms"], p["ack_p90_ms"], p["ack_p99_ms"],
                                      p["ack_max_ms"]] for p in paired])
    print()
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}\n")
    report("tls", HEADER, ratios(results), {"args": {k: str(v) for k, v in vars(args).items()},
                                            "loadavg_before": load_before, "loadavg_after": load_after,
                                            "results": results, "paced": pace,
                                            "interleaved": paired})


if __name__ == "__main__":
    main()
