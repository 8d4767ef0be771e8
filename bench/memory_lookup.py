"""Lookups of rows still in a table server's memory: a block's key index against a pass
over the block's key column, as unflushed rows grow.

    .venv/bin/python -m bench.memory_lookup [--sizes 100000,1000000,3000000] [--lookups 300]
        [--rows-per-write 10000]

For each size, one table server in this process (no Ray, no Flight: the server's own
read path) holds that many unflushed rows of one file group (one bucket, no partitions)
in a single block, written as ``--rows-per-write``-row upserts of distinct int64 keys;
then ``--lookups`` calls of ``client.lookup(table, [k])`` for random written keys:

* **first lookup**: the first one after the writes, which indexes the whole block
  (its keys sorted into runs; later lookups index only the frames added since);
* **lookup p50/p99**: the rest, each through the index (a binary search of each run);
* **baseline** (same run, same rows): one vectorized pass over the block's key column
  (``numpy``, the rows equal to the key), which is what a lookup in the block cost before
  the index kept sorted runs; median over the same keys.

Prints a table; writes bench/results/memory_lookup.json (with the load average before and
after).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.batches import make_batches, percentiles_ms
from bench.ceiling import scratch_dir
from bench.common import report
from memtier.config import TableServerConfig
from tests.support.inprocess import InProcessCluster

HEADER = ["rows unflushed", "blocks", "first lookup ms", "lookup p50 ms", "lookup p99 ms", "scan p50 ms (baseline)",
          "scan / lookup p50"]


def cell(root: Path, rows: int, args: argparse.Namespace) -> dict[str, Any]:
    """One table holding ``rows`` unflushed rows in one block; its lookups and the scan."""
    cluster = InProcessCluster(str(root), config=TableServerConfig(
        block_max_age=timedelta(hours=1), flush_interval=timedelta(hours=1), memory_budget=16 << 30,
        block_max_bytes=8 << 30,
    ))
    server = cluster.add_server("ts-0")
    client = cluster.client()
    try:
        writes = [pa.Table.from_batches([b]) for b in make_batches(rows // args.rows_per_write, args.rows_per_write)]
        client.create_table("t", writes[0].schema, record_key="key", ordering_field="ts", buckets=1)
        for table in writes:
            client.write("t", table)
        blocks = server.status()["tables"]["t"]["blocks"]
        column = np.concatenate([t.column("key").to_numpy() for t in writes])
        keys = np.random.default_rng(rows).choice(column, args.lookups).tolist()
        start = time.perf_counter()
        client.lookup("t", [keys[0]])
        first = time.perf_counter() - start
        took = []
        for key in keys[1:]:
            start = time.perf_counter()
            found = client.lookup("t", [key])
            took.append(time.perf_counter() - start)
            assert found.num_rows == 1, f"key {key}: {found.num_rows} rows"
        scans = []
        for key in keys[1:]:
            start = time.perf_counter()
            np.flatnonzero(column == key)
            scans.append(time.perf_counter() - start)
    finally:
        cluster.close()
    lookup = percentiles_ms("lookup", took)
    scan = float(np.median(scans)) * 1000
    return {"rows": rows, "blocks": blocks, "first_ms": round(first * 1000, 1), **lookup,
            "scan_p50_ms": round(scan, 3), "scan_vs_lookup": round(scan / lookup["lookup_p50_ms"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000,3000000", help="unflushed rows of each cell")
    parser.add_argument("--lookups", type=int, default=300)
    parser.add_argument("--rows-per-write", type=int, default=10_000)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    load = os.getloadavg()
    with scratch_dir(Path(args.dir) if args.dir else None) as root:
        results = [cell(root / f"cell-{size}", size, args) for size in (int(s) for s in args.sizes.split(","))]
    keys = ["rows", "blocks", "first_ms", "lookup_p50_ms", "lookup_p99_ms", "scan_p50_ms", "scan_vs_lookup"]
    print(f"{args.lookups} lookups a cell; load average before {load[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    report("memory_lookup", HEADER, [[r[k] for k in keys] for r in results],
           {"args": vars(args), "loadavg_before": load, "loadavg_after": os.getloadavg(), "results": results})


if __name__ == "__main__":
    main()
