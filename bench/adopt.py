"""Adoption's conversion into buckets against a plain Parquet read + write of the same rows.

    .venv/bin/python -m bench.adopt [--rows 2000000] [--from-buckets 8] [--buckets 4] [--repeat 3]

A table of version 9 whose ``--rows`` rows lie in ``--from-buckets`` base files, its bucket
index then forgotten (as a table Hudi wrote with its default index knows none), is adopted
with ``--buckets``: the conversion a pool worker runs, timed (a clustering of every file
group: plan, requested and inflight on the timeline, every bucket's new base file written
durably, completed). The baseline, same run, same rows: ``pyarrow.parquet`` reads each base
file and writes it again (in parallel). Median of ``--repeat``, each on a fresh table.
Prints the table; writes bench/results/adopt.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import BENCH_SCHEMA, bench_table, report
from bench.compaction import base_files, parquet_rewrite
from memtier.compaction import service_actions
from memtier.compaction.cluster import cluster, clustering_metadata, plan_clustering
from memtier.hudi import HudiTable
from memtier.hudi.adopt import fits_buckets
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.properties import rewrite_table_config
from memtier.hudi.timeline import new_instant_time


def prepare(path: Path, rows: int, from_buckets: int) -> HudiTable:
    """A version 9 table of ``rows`` rows in ``from_buckets`` base files, its bucket index forgotten."""
    table = HudiTable.create(str(path), BENCH_SCHEMA, record_key="key", ordering_field="ts",
                             buckets=from_buckets, table_version=9)
    table.write(bench_table(rows))
    rewrite_table_config(table.io, table.path, dataclasses.replace(table.config, buckets=None))
    return HudiTable.open(str(path))


def convert(table: HudiTable, buckets: int) -> int:
    """Adopt with ``buckets`` and run the conversion as a pool worker does; the rows written."""
    table.set_bucket_index(buckets, convert=True)
    meta = table.meta
    timeline = meta.timeline()
    plan = plan_clustering(meta, FileSystemView.build(meta.io, meta.base_path, timeline), force=True)
    assert plan is not None, "nothing to convert"
    instant = new_instant_time(timeline.last_timestamp())
    writer = meta.timeline_writer()
    action = service_actions(meta.layout)["clustering"]
    inflight = writer.inflight(writer.request(instant, action, plan.to_avro(meta.base_path)))
    stats, replaced = cluster(meta, instant, plan, meta.timeline())
    writer.complete(inflight, clustering_metadata(meta, stats, replaced).encode(meta.layout))
    return sum(s.num_writes for s in stats)


def throughput(root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    conversion, baseline = [], []
    for i in range(args.repeat):
        path = root / f"table-{i}"
        table = prepare(path, args.rows, args.from_buckets)
        start = time.perf_counter()
        written = parquet_rewrite(base_files(path), root / f"plain-{i}")
        baseline.append((time.perf_counter() - start, written))
        start = time.perf_counter()
        converted = convert(table, args.buckets)
        conversion.append((time.perf_counter() - start, converted))
        assert converted == args.rows, (converted, args.rows)
        table = HudiTable.open(str(path))
        assert fits_buckets(FileSystemView.build(table.io, table.path, table.timeline()), args.buckets)
        assert table.read("read_optimized", columns=["key"]).num_rows == args.rows
        shutil.rmtree(path)
        shutil.rmtree(root / f"plain-{i}")
    base_s = statistics.median(s for s, _ in baseline)
    results = []
    for name, runs in (("parquet read + write (baseline)", baseline), ("conversion into buckets", conversion)):
        seconds = statistics.median(s for s, _ in runs)
        results.append({"what": name, "rows": runs[0][1], "seconds": round(seconds, 3),
                        "rows_per_s": round(runs[0][1] / seconds), "ratio": round(base_s / seconds, 2),
                        "runs_s": [round(s, 3) for s, _ in runs]})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--from-buckets", type=int, default=8)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memtier-bench-adopt-") as root:
        results = throughput(Path(root), args)
    report("adopt", ["what", "rows", "seconds", "rows_per_s", "ratio", "runs_s"],
           [[r[k] for k in ("what", "rows", "seconds", "rows_per_s", "ratio", "runs_s")] for r in results],
           {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
