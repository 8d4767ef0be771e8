"""Apache Hudi on Spark beside memtier on the read and compaction workloads: the same rows
in the same table layout, one run.

    .venv/bin/python -m bench.hudi_spark_peer_read [--dir DIR] [--rows 1000000] [--buckets 4]
        [--update-fraction 0.1] [--log-files 2] [--repeat 3]

Two merge-on-read bucket-index tables (``--buckets`` buckets, table version 6, no
partitions, upserts keyed on ``key`` ordered by ``ts``) of bench/compaction.py's rows: base
files of ``--rows`` rows, then ``--update-fraction`` of the keys updated in ``--log-files``
deltacommits, so every slice's logs hold that fraction of its rows as updates:

- ``hudi``: written by Hudi's Spark writer (Hudi 1.0.2, Spark 3.5 ``local[2]``, one worker
  process made by ``tests/support/hudi_spark.py``): a bulk insert (base files), then one
  upsert per update batch (log files); metadata table off, no compaction on write;
- ``memtier``: written by memtier (bench/compaction.py's ``prepare``).

1. read: a merged snapshot of every row and column of each table, by Hudi on Spark
   (``spark.read.format("hudi")`` into Spark's no-op sink, so every row and column is
   read and merged) and by memtier's reader (``HudiTable.read``, what a client read runs
   per file slice). Median of ``--repeat``.
2. compaction: every slice's base file and logs into a new base file, once per table (it
   consumes the logs): Hudi's own on Hudi's table (Spark SQL ``CALL run_compaction(op =>
   'scheduleAndExecute')``), memtier's on memtier's (bench/compaction.py's ``compact_all``,
   exactly as a pool worker runs it). Each table's read-optimized view then holds every
   update.

Also reported: each update batch's Hudi commit (the write call: a Hudi write is visible once
it returns). memtier's ack-to-visible for writes is bench/hudi_spark_peer.py's.

Prints one table and writes bench/results/hudi_spark_peer_read.json; ``vs hudi`` is rows/s
over Hudi on Spark's on the same workload and table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.batches import percentiles_ms
from bench.ceiling import scratch_dir
from bench.common import bench_table, best_of, report
from bench.compaction import compact_all, prepare, updates
from memtier.hudi import HudiTable
from tests.support.hudi_spark import KEEP_LOGS, HudiSpark, writer_options

HEADER = ["workload", "system", "table", "rows", "seconds", "rows/s", "vs hudi"]


def hudi_write(spark: HudiSpark, path: str, args: argparse.Namespace) -> list[float]:
    """Hudi's table: a bulk insert, then the update batches as upserts; each upsert's seconds."""
    options = {**writer_options("peer", "key", "ts", buckets=args.buckets, table_version=6),
               "hoodie.metadata.enable": "false", **KEEP_LOGS}
    spark.write(path, bench_table(args.rows), {**options, "hoodie.datasource.write.operation": "bulk_insert"})
    return [spark.write(path, batch, options) for batch in updates(args.rows, args.update_fraction, args.log_files)]


def spark_read(spark: HudiSpark, path: str, repeat: int) -> tuple[float, int]:
    """Median seconds of Hudi's snapshot scans of ``path``, and the rows they read."""
    scans = [spark.request("scan", path=path, options={}) for _ in range(repeat)]
    return statistics.median(s["seconds"] for s in scans), scans[0]["rows"]


def memtier_read(path: str, repeat: int) -> tuple[float, int]:
    """Median seconds of memtier's snapshot reads of ``path``, and the rows."""
    rows = HudiTable.open(path).read().num_rows
    return best_of(repeat, lambda: HudiTable.open(path).read())[0], rows


def hudi_compaction(spark: HudiSpark, path: str) -> float:
    """Hudi's compaction of every slice of ``path``, scheduled and run in one call; seconds."""
    answer = spark.request("sql", query=(
        f"CALL run_compaction(op => 'scheduleAndExecute', path => '{path}', "
        "options => 'hoodie.compact.inline.max.delta.commits=1,hoodie.write.table.version=6,hoodie.metadata.enable=false')"))
    return answer["seconds"]


def row(workload: str, system: str, table: str, rows: int, seconds: float) -> dict[str, Any]:
    return {"workload": workload, "system": system, "table": table, "rows": rows,
            "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None,
                        help="where tables go (default: a temporary dir under /tmp, removed after)")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--update-fraction", type=float, default=0.1)
    parser.add_argument("--log-files", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    load_before = os.getloadavg()
    results: list[dict[str, Any]] = []
    with scratch_dir(args.dir) as root:
        hudis, ours = str(root / "hudi"), root / "memtier"
        memtier_table = prepare(ours, args.rows, args.buckets, args.update_fraction, args.log_files)
        with HudiSpark(root) as spark:
            commits = hudi_write(spark, hudis, args)
            for name, path in (("hudi", hudis), ("memtier", str(ours))):
                seconds, rows = spark_read(spark, path, args.repeat)
                results.append(row("read", "hudi-spark", name, rows, seconds))
                seconds, rows = memtier_read(path, args.repeat)
                results.append(row("read", "memtier", name, rows, seconds))
            seconds = hudi_compaction(spark, hudis)
            updated = int(args.rows * args.update_fraction)
            compacted = spark.request("count", path=hudis, where="ts >= 2",
                                      options={"hoodie.datasource.query.type": "read_optimized"})
            assert compacted["rows"] == updated, compacted  # the base files hold the updates
            results.append(row("compaction", "hudi-spark", "hudi", args.rows, seconds))
            versions = spark.versions
        start = time.perf_counter()
        assert compact_all(memtier_table) == args.rows
        results.append(row("compaction", "memtier", "memtier", args.rows, time.perf_counter() - start))
        base_files = memtier_table.read("read_optimized", columns=["ts"])
        assert base_files.num_rows == args.rows and pc.sum(pc.greater_equal(base_files["ts"], 2)).as_py() == updated
    results.sort(key=lambda r: (r["workload"] != "read", r["table"], r["system"] != "hudi-spark"))
    print(f"Hudi's commit of each update batch ({args.rows * args.update_fraction / args.log_files:,.0f} rows): "
          f"{[round(s, 2) for s in commits]} s\n")
    hudi_rate = {(r["workload"], r["table"]): r["rows_per_s"] for r in results if r["system"] == "hudi-spark"}
    rows_out = [[r["workload"], r["system"], r["table"], r["rows"], r["seconds"], r["rows_per_s"],
                 round(r["rows_per_s"] / hudi_rate.get((r["workload"], r["table"]), hudi_rate[(r["workload"], "hudi")]), 2)]
                for r in results]
    report("hudi_spark_peer_read", HEADER, rows_out, {
        "rows": args.rows, "buckets": args.buckets, "update_fraction": args.update_fraction,
        "log_files": args.log_files, "repeat": args.repeat, **versions,
        **percentiles_ms("hudi_update_commit", commits),
        "load_before": load_before, "load_after": os.getloadavg(), "results": results,
    })


if __name__ == "__main__":
    main()
