"""Merged snapshot read throughput against reading the same rows as plain Parquet.

    .venv/bin/python -m bench.hudi_read --rows 10000000

The table has N rows in base files and 10% of them updated in log files (one block
format per table); "plain" reads a Parquet file of the same N rows with
``pyarrow.parquet.read_table`` (no merge). Also reports read-optimized reads.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from bench.common import BENCH_SCHEMA, bench_table, best_of, report
from memtier.hudi import HudiTable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--update-fraction", type=float, default=0.1)
    parser.add_argument("--buckets", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()

    root = Path(args.dir or tempfile.mkdtemp(prefix="memtier-bench-"))
    data = bench_table(args.rows)
    n_updates = int(args.rows * args.update_fraction)
    keys = np.random.default_rng(3).choice(args.rows, n_updates, replace=False)
    updates = bench_table(n_updates, seed=4, keys=keys, ts=2)
    print(f"{args.rows:,} rows, {n_updates:,} updated in logs, {args.buckets} buckets, in {root}\n")

    plain = root / "plain.parquet"
    pq.write_table(data, plain)
    results = {"plain parquet read (baseline)": best_of(args.repeat, lambda: pq.read_table(plain))[0]}
    for block_format in ("avro", "parquet"):
        path = root / f"table-{block_format}"
        shutil.rmtree(path, ignore_errors=True)
        table = HudiTable.create(str(path), BENCH_SCHEMA, record_key="key", ordering_field="ts",
                                 buckets=args.buckets, log_block_format=block_format)
        table.write(data)
        table.write(updates)
        merged = table.read()
        assert merged.num_rows == args.rows, merged.num_rows
        results[f"snapshot read, {block_format} logs"] = best_of(args.repeat, table.read)[0]
        results[f"read-optimized read, {block_format}"] = best_of(
            args.repeat, lambda t=table: t.read(mode="read_optimized"))[0]

    base = results["plain parquet read (baseline)"]
    rows = [
        [name, round(seconds, 3), round(args.rows / seconds), round(base / seconds, 2)]
        for name, seconds in results.items()
    ]
    report("hudi_read", ["read", "seconds", "rows/s", "ratio to baseline"], rows,
           {"rows": args.rows, "updated_rows": n_updates, "buckets": args.buckets,
            "repeat": args.repeat})
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
