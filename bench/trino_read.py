"""Trino query time over a compacted memtier table, against reading the same base files
with pyarrow in the same run.

    .venv/bin/python -m bench.trino_read --rows 2000000

The table (``--buckets`` file groups) gets N rows, then ``--update-fraction`` of them
updated into log files, then memtier's compaction (the table services' own code, run in
this process) folds the logs into new base files. ``memtier.catalog`` registers it in a
file metastore and a real Trino server (scripts/fetch_trino.sh) queries it through its
Hudi connector: an aggregate over every row and column, a key range, a single key. The
baseline runs the same aggregate with pyarrow over the same base files (no engine, no
network); memtier's and hudi-rs's read-optimized reads of the table stand beside it.
Each figure is the median of ``--repeat`` runs after one warm-up.
"""

from __future__ import annotations

import argparse
import math
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.common import BENCH_SCHEMA, bench_table, best_of, report
from memtier.catalog import FileMetastore, sync_table
from memtier.compaction.worker import ServiceWorker
from memtier.hudi import HudiTable
from tests.support.hudirs import hudi_rs_read
from tests.support.inprocess import InProcessCluster
from tests.support.trino import run_trino


def _compacted_table(root: Path, rows: int, update_fraction: float, buckets: int) -> tuple[HudiTable, pa.Table]:
    """The table after N rows, their updates in logs, and a compaction; the expected rows."""
    data = bench_table(rows)
    n_updates = int(rows * update_fraction)
    keys = np.sort(np.random.default_rng(3).choice(rows, n_updates, replace=False))
    updates = bench_table(n_updates, seed=4, keys=keys, ts=2)
    path = root / "t"
    table = HudiTable.create(str(path), BENCH_SCHEMA, record_key="key", ordering_field="ts", buckets=buckets)
    table.write(data)
    table.write(updates)
    cluster = InProcessCluster(str(root / "cluster"))
    cluster.add_server("ts-0")
    try:
        cluster.client().register_table("t", str(path))
        assert cluster.master.schedule_service("t", "compaction") is not None
        done = ServiceWorker("bench", cluster.master).run_once()
        assert done is not None and done["state"] == "completed", done
    finally:
        cluster.close()
    table = HudiTable.open(str(path))
    assert not any(s.log_files for s in table.file_slices()), "compaction left log files"
    return table, table.read(mode="read_optimized")


def _aggregate(t: pa.Table) -> tuple[int, float, int, str]:
    return (t.num_rows, pc.sum(t["value"]).as_py(), pc.sum(t["count"]).as_py(), pc.max(t["name"]).as_py())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--update-fraction", type=float, default=0.1)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--heap", default="1G", help="Trino's JVM heap (default: %(default)s)")
    parser.add_argument("--fast-start", action="store_true",
                        help="start Trino with the C1 JIT only (quicker start, slower queries: smoke runs)")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="memtier-bench-trino-"))
    try:
        table, expected = _compacted_table(root, args.rows, args.update_fraction, args.buckets)
        base_files = [s.base_file_path(table.path) for s in table.file_slices()]
        print(f"{args.rows:,} rows, {int(args.rows * args.update_fraction):,} updated then compacted, "
              f"{len(base_files)} base files, in {root}\n")
        started = time.perf_counter()
        with run_trino(heap=args.heap, fast_start=args.fast_start) as trino:
            server_start = time.perf_counter() - started
            sync_table(table.meta, FileMetastore(trino.metastore), name="bench")
            lo, hi = args.rows // 4, args.rows // 4 + args.rows // 100
            want = _aggregate(expected)
            full_scan = "aggregate over every row"
            queries = {
                full_scan: "SELECT count(*), sum(value), sum(count), max(name) FROM bench_ro",
                "key range (1% of rows)": f"SELECT count(*) FROM bench_ro WHERE key BETWEEN {lo} AND {hi - 1}",
                "one key": f"SELECT key FROM bench_ro WHERE key = {lo}",
            }
            answers = {full_scan: None, "key range (1% of rows)": [[hi - lo]], "one key": [[lo]]}
            results: dict[str, tuple[float, int | None]] = {}
            for name, sql in queries.items():
                got = trino.query(sql)  # warm-up, and the answer checked
                if name == full_scan:
                    (count, total, counts, top), = got
                    assert (count, counts, top) == (want[0], want[2], want[3]), (got, want)
                    assert math.isclose(total, want[1], rel_tol=1e-9), (got, want)
                else:
                    assert got == answers[name], (name, got)
                results[f"Trino: {name}"] = (best_of(args.repeat, lambda s=sql: trino.query(s))[0],
                                             args.rows if name == full_scan else None)
        results["pyarrow: the same base files, aggregate (baseline)"] = (
            best_of(args.repeat, lambda: _aggregate(pq.read_table(base_files)))[0], args.rows)
        results["memtier read_optimized read, aggregate"] = (
            best_of(args.repeat, lambda: _aggregate(table.read(mode="read_optimized")))[0], args.rows)
        results["hudi-rs read_optimized read, aggregate"] = (
            best_of(args.repeat, lambda: _aggregate(hudi_rs_read(table.path, "read_optimized")))[0], args.rows)

        base = results["pyarrow: the same base files, aggregate (baseline)"][0]
        rows = [[name, round(seconds, 3), round(n / seconds) if n else "", round(seconds / base, 2)]
                for name, (seconds, n) in results.items()]
        report("trino_read", ["query", "seconds", "rows/s (full scans)", "time vs baseline"], rows,
               {"rows": args.rows, "update_fraction": args.update_fraction, "buckets": args.buckets,
                "repeat": args.repeat, "trino_heap": args.heap, "fast_start": args.fast_start,
                "trino_server_start_seconds": round(server_start, 1)})
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
