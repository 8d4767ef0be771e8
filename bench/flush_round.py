"""One flush round of many small writes over many file groups, through the flush worker:
how long it takes and what it costs, against writing the same rows as one Parquet file.

    .venv/bin/python -m bench.flush_round [--writes 1100] [--rows 1000] [--buckets 4]
        [--partitions 5] [--keys 100000] [--repeat 3]

The shape of ``memtier demo``: ``--writes`` upserts of ``--rows`` rows over a key space of
``--keys`` ids, partitioned by a city column (``--partitions`` values) and bucketed
(``--buckets``), so each write holds a frame for every file group and a round holds many
versions of each key. One table server in this process (no Ray), flushes deferred until
the round is written; the worker is started (and warmed by a first flush) before the
timed flush. ``flush s`` is the client's ``flush`` call (the master's commit included),
``worker cpu s`` the flush worker's CPU during it. The baseline, in the same run:
``pyarrow.parquet.write_table`` of the round's rows (every version, one file, synced).

Prints a table; writes bench/results/flush_round.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import cpu_seconds, report
from memtier.config import FlushWorker, TableServerConfig
from tests.support.inprocess import InProcessCluster

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("name", pa.string()), ("value", pa.float64()),
                    ("city", pa.string())])


def _writes(args: argparse.Namespace, seed: int) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    cities = np.array([f"city-{i}" for i in range(args.partitions)])
    tables = []
    for n in range(args.writes):
        ids = rng.integers(0, args.keys, args.rows)
        tables.append(pa.table({
            "id": ids, "ts": np.arange(n * args.rows, (n + 1) * args.rows, dtype=np.int64),
            "name": np.char.add("user-", ids.astype(str)), "value": rng.random(args.rows),
            "city": cities[ids % args.partitions],
        }, schema=SCHEMA))
    return tables


def run(root: Path, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One round: a fresh master, table server and table; one timed flush of the round."""
    cluster = InProcessCluster(str(root), config=TableServerConfig(
        flush_worker=FlushWorker.PROCESS, block_max_age=timedelta(hours=1), flush_interval=timedelta(hours=1),
        memory_budget=8 << 30,
    ))
    server = cluster.add_server("ts-0")
    client = cluster.client()
    try:
        client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", partition_fields="city",
                            buckets=args.buckets)
        writes = _writes(args, seed)
        for table in writes[:10]:
            client.write("t", table)
        client.flush("t")  # every file group's first file; the worker started and warm
        for table in writes:
            client.write("t", table)
        worker = server.flusher.pid
        assert worker is not None
        cpu = cpu_seconds(worker)
        start = time.perf_counter()
        client.flush("t")
        took = time.perf_counter() - start
        cpu = cpu_seconds(worker) - cpu
        rows = pa.concat_tables(writes)
        path = root / "baseline.parquet"
        start = time.perf_counter()
        pq.write_table(rows, path)
        with open(path, "rb+") as f:
            os.fsync(f.fileno())
        parquet = time.perf_counter() - start
    finally:
        cluster.close()
    return {"rows": rows.num_rows, "file_groups": args.buckets * args.partitions, "flush_s": round(took, 3),
            "worker_cpu_s": round(cpu, 2), "rows_per_s": round(rows.num_rows / took),
            "parquet_s": round(parquet, 3), "vs_parquet": round(parquet / took, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=1100)
    parser.add_argument("--rows", type=int, default=1000, help="rows a write")
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=5)
    parser.add_argument("--keys", type=int, default=100_000, help="distinct ids written to")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="memtier-bench-flush-round-"))
    load = os.getloadavg()
    try:
        results = [run(root / f"round-{i}", args, seed=i) for i in range(args.repeat)]
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    keys = ["rows", "file_groups", "flush_s", "worker_cpu_s", "rows_per_s", "parquet_s", "vs_parquet"]
    rows = [[i, *(r[k] for k in keys)] for i, r in enumerate(results)]
    rows.append(["median", *(statistics.median(r[k] for r in results) for k in keys)])
    print(f"{args.writes} writes of {args.rows} rows, {args.keys:,} keys, {args.buckets} buckets x "
          f"{args.partitions} partitions; load average before {load[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    report("flush_round", ["round", "rows", "file groups", "flush s", "worker cpu s", "rows/s", "parquet write s",
                           "parquet s / flush s"], rows, {"args": vars(args), "loadavg_before": load,
                                                          "results": results})


if __name__ == "__main__":
    main()
