"""Trino query time over a compacted memtier table, against the same rows written by Apache
Hudi's Spark writer and against reading memtier's base files with pyarrow, in the same run.

    .venv/bin/python -m bench.trino_read --rows 2000000

The table (``--buckets`` file groups) gets N rows, then ``--update-fraction`` of them
updated into log files, then memtier's compaction (the table services' own code, run in
this process) folds the logs into new base files. The peer: the same rows, the same
layout (merge-on-read, bucket index, Hudi table version 6), written by Apache Hudi 1.0.2 on
Spark (tests/support/hudi_spark.py) with Hudi's inline compaction. ``memtier.catalog``
registers both in a file metastore and a real Trino server (scripts/fetch_trino.sh) queries
them through its Hudi connector: an aggregate over every row and column, a key range, a
single key. The baseline runs the same aggregate with pyarrow over memtier's base files
(no engine, no network); memtier's and hudi-rs's read-optimized reads of the table stand
beside it. Each figure is the median of ``--repeat`` runs after one warm-up.
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
from tests.support.trino import TrinoServer, run_trino


def _inputs(rows: int, update_fraction: float) -> tuple[pa.Table, pa.Table]:
    """N rows, and updates of ``update_fraction`` of them (a later ``ts``)."""
    n_updates = int(rows * update_fraction)
    keys = np.sort(np.random.default_rng(3).choice(rows, n_updates, replace=False))
    return bench_table(rows), bench_table(n_updates, seed=4, keys=keys, ts=2)


def _memtier_table(root: Path, data: pa.Table, updates: pa.Table, buckets: int) -> HudiTable:
    """memtier's table after the rows, their updates in logs, and memtier's compaction."""
    path = root / "memtier"
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
    return HudiTable.open(str(path))


def _hudi_spark_table(root: Path, data: pa.Table, updates: pa.Table, buckets: int) -> HudiTable:
    """The same rows written by Apache Hudi's Spark writer into the same layout (merge-on-read,
    bucket index, table version 6, upserts), compacted inline by Hudi after each write."""
    from tests.support.hudi_spark import HudiSpark, writer_options

    path = str(root / "hudi-spark")
    options = writer_options("peer", "key", "ts", buckets=buckets, table_version=6, **{
        "hoodie.compact.inline": "true", "hoodie.compact.inline.max.delta.commits": "1"})
    with HudiSpark(root) as spark:
        spark.write(path, data, options)
        spark.write(path, updates, options)
    return HudiTable.open(path)


def _aggregate(t: pa.Table) -> tuple[int, float, int, str]:
    return (t.num_rows, pc.sum(t["value"]).as_py(), pc.sum(t["count"]).as_py(), pc.max(t["name"]).as_py())


def _time_trino(trino: TrinoServer, table: str, rows: int, repeat: int,
                want: tuple[int, float, int, str]) -> dict[str, tuple[float, int | None]]:
    """Median seconds of each query over ``table`` (answers checked on the warm-up run)."""
    lo, hi = rows // 4, rows // 4 + rows // 100
    queries = {
        "aggregate over every row": ("SELECT count(*), sum(value), sum(count), max(name) FROM " + table, None),
        "key range (1% of rows)": (f"SELECT count(*) FROM {table} WHERE key BETWEEN {lo} AND {hi - 1}",
                                   [[hi - lo]]),
        "one key": (f"SELECT key FROM {table} WHERE key = {lo}", [[lo]]),
    }
    results: dict[str, tuple[float, int | None]] = {}
    for name, (sql, answer) in queries.items():
        got = trino.query(sql)  # the warm-up
        if answer is None:
            (count, total, counts, top), = got
            assert (count, counts, top) == (want[0], want[2], want[3]), (table, got, want)
            assert math.isclose(total, want[1], rel_tol=1e-9), (table, got, want)
        else:
            assert got == answer, (table, name, got)
        results[name] = (best_of(repeat, lambda s=sql: trino.query(s))[0], rows if answer is None else None)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--update-fraction", type=float, default=0.1)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--heap", default="1G", help="Trino's JVM heap (default: %(default)s)")
    parser.add_argument("--fast-start", action="store_true",
                        help="start Trino with the C1 JIT only (quicker start, slower queries: smoke runs)")
    parser.add_argument("--no-hudi-spark", action="store_true",
                        help="skip the same rows written by Apache Hudi's Spark writer")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="memtier-bench-trino-"))
    try:
        data, updates = _inputs(args.rows, args.update_fraction)
        tables = {"memtier": _memtier_table(root, data, updates, args.buckets)}
        if not args.no_hudi_spark:
            tables["Hudi Spark writer"] = _hudi_spark_table(root, data, updates, args.buckets)
        for writer, table in tables.items():
            assert not any(s.log_files for s in table.file_slices()), f"{writer}: compaction left log files"
        memtier = tables["memtier"]
        expected = memtier.read(mode="read_optimized")
        want = _aggregate(expected)
        base_files = [s.base_file_path(memtier.path) for s in memtier.file_slices()]
        print(f"{args.rows:,} rows, {len(updates):,} updated then compacted, written by "
              f"{' and '.join(tables)}; memtier's table has {len(base_files)} base files, in {root}\n")
        results: dict[str, tuple[float, int | None]] = {}
        started = time.perf_counter()
        with run_trino(heap=args.heap, fast_start=args.fast_start) as trino:
            server_start = time.perf_counter() - started
            for writer, table in tables.items():
                name = "memtier" if writer == "memtier" else "peer"
                sync_table(table.meta, FileMetastore(trino.metastore), name=name)
                for query, figures in _time_trino(trino, f"{name}_ro", args.rows, args.repeat, want).items():
                    results[f"Trino: {query}, {writer}'s table"] = figures
        results["pyarrow: memtier's base files, aggregate (baseline)"] = (
            best_of(args.repeat, lambda: _aggregate(pq.read_table(base_files)))[0], args.rows)
        results["memtier read_optimized read, aggregate"] = (
            best_of(args.repeat, lambda: _aggregate(memtier.read(mode="read_optimized")))[0], args.rows)
        results["hudi-rs read_optimized read, aggregate"] = (
            best_of(args.repeat, lambda: _aggregate(hudi_rs_read(memtier.path, "read_optimized")))[0], args.rows)

        base = results["pyarrow: memtier's base files, aggregate (baseline)"][0]
        rows = [[name, round(seconds, 3), round(n / seconds) if n else "", round(seconds / base, 2)]
                for name, (seconds, n) in results.items()]
        report("trino_read", ["query", "seconds", "rows/s (full scans)", "time vs baseline"], rows,
               {"rows": args.rows, "update_fraction": args.update_fraction, "buckets": args.buckets,
                "repeat": args.repeat, "trino_heap": args.heap, "fast_start": args.fast_start,
                "writers": list(tables), "trino_server_start_seconds": round(server_start, 1)})
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
