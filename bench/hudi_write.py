"""Write throughput of Hudi base files and log files (Avro and Parquet blocks), against
plain ``pyarrow.parquet.write_table`` of the same rows in the same run.

    .venv/bin/python -m bench.hudi_write --rows 10000000

Every memtier figure is an end-to-end ``HudiTable.write``: routing (record keys, bucket
hashes), meta columns, encoding, durable (fsync'd) files and the commit on the timeline.
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
    parser.add_argument("--buckets", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()

    root = Path(args.dir or tempfile.mkdtemp(prefix="memtier-bench-"))
    data = bench_table(args.rows)
    updates = bench_table(args.rows, seed=1, keys=np.random.default_rng(2).permutation(args.rows), ts=2)
    print(f"{args.rows:,} rows, {data.nbytes / 1e6:,.0f} MB in memory, {args.buckets} buckets, in {root}\n")

    def fresh(name: str) -> Path:
        path = root / name
        shutil.rmtree(path, ignore_errors=True)
        return path

    def baseline() -> None:
        path = fresh("plain")
        path.mkdir()
        pq.write_table(data, path / "data.parquet")

    results = {}
    results["pyarrow write_table (baseline)"] = best_of(args.repeat, baseline)[0]

    def base_files() -> None:
        HudiTable.create(str(fresh("base")), BENCH_SCHEMA, record_key="key", ordering_field="ts",
                         buckets=args.buckets).write(data)

    results["base files (new file groups)"] = best_of(args.repeat, base_files)[0]

    for block_format in ("avro", "parquet"):
        tables = []
        for i in range(args.repeat):  # set up outside the timed region
            path = fresh(f"log-{block_format}-{i}")
            table = HudiTable.create(str(path), BENCH_SCHEMA, record_key="key", ordering_field="ts",
                                     buckets=args.buckets, log_block_format=block_format)
            table.write(data)
            tables.append(table)
        remaining = iter(tables)
        seconds = best_of(args.repeat, lambda it=remaining: next(it).write(updates))[0]
        results[f"log files, {block_format} blocks"] = seconds

    base_seconds = results["pyarrow write_table (baseline)"]
    rows = [
        [name, round(seconds, 3), round(args.rows / seconds), round(base_seconds / seconds, 2)]
        for name, seconds in results.items()
    ]
    report("hudi_write", ["write", "seconds", "rows/s", "ratio to baseline"], rows,
           {"rows_written": args.rows, "buckets": args.buckets, "repeat": args.repeat})
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
