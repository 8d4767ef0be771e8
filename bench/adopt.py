"""Adoption's conversion into buckets against a plain Parquet read + write of the same rows;
a flush's commit latency on a table that keeps Hudi's metadata table against one without.

    .venv/bin/python -m bench.adopt [--rows 2000000] [--from-buckets 8] [--buckets 4] [--repeat 3]
        [--flushes 60] [--flush-rows 2000]

A table of version 9 whose ``--rows`` rows lie in ``--from-buckets`` base files, its bucket
index then forgotten (as a table Hudi wrote with its default index knows none), is adopted
with ``--buckets``: the conversion a pool worker runs, timed (a clustering of every file
group: plan, requested and inflight on the timeline, every bucket's new base file written
durably, completed). The baseline, same run, same rows: ``pyarrow.parquet`` reads each base
file and writes it again (in parallel). Median of ``--repeat``, each on a fresh table.

Flush latency: two tables of version 9 served by one in-process table server, one with a
metadata table (``files`` partition: Hudi 1.x's layout, the stand-in of
``tests/support/metadata_table.py``) that every commit updates first, one without; each of
``--flushes`` rounds writes ``--flush-rows`` rows (upserts of the same keys) to each table
and times the client's ``flush`` of each (log files, the master's commit and, for the
first table, the metadata table's deltacommit); the first 5 rounds are warm-up. p50/p99
of each and their ratio.

Prints the tables; writes bench/results/adopt.json.
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

from bench.common import BENCH_SCHEMA, bench_table, print_table, report
from bench.compaction import base_files, parquet_rewrite
from memtier.compaction import service_actions
from memtier.compaction.cluster import cluster, clustering_metadata, plan_clustering
from memtier.hudi import HudiTable
from memtier.hudi.adopt import fits_buckets
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.properties import rewrite_table_config
from memtier.hudi.timeline import new_instant_time
from memtier.io import open_fileio
from tests.support.inprocess import InProcessCluster
from tests.support.metadata_table import add_metadata_table

WARM_UP = 5


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


def flush_latency(root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """p50/p99 of a flush's latency with and without the metadata table kept current."""
    cluster = InProcessCluster(str(root / "cluster"))
    try:
        cluster.add_server("ts-0")
        client = cluster.client()
        names = {"without a metadata table (baseline)": "plain", "metadata table kept current": "kept"}
        for name in names.values():
            path = client.create_table(name, BENCH_SCHEMA, record_key="key", ordering_field="ts",
                                       buckets=args.buckets, table_version=9)["path"]
            if name == "kept":
                add_metadata_table(open_fileio(path), path)
        seconds: dict[str, list[float]] = {name: [] for name in names.values()}
        for i in range(args.flushes + WARM_UP):
            for name in (names.values() if i % 2 else reversed(names.values())):
                client.write(name, bench_table(args.flush_rows, seed=i, ts=i + 1))
                start = time.perf_counter()
                assert client.flush(name)
                if i >= WARM_UP:
                    seconds[name].append(time.perf_counter() - start)
        kept = HudiTable.open(client.master.meta("kept").base_path)
        assert kept.meta.config.raw.get("hoodie.table.metadata.partitions") == "files"
        mdt_logs = [f for f in kept.io.list_dir(f"{kept.path}/.hoodie/metadata/files") if ".log." in f.name]
        assert len(mdt_logs) == args.flushes + WARM_UP + 1, len(mdt_logs)  # one per flush, and the stand-in's
    finally:
        cluster.close()
    base = statistics.median(seconds["plain"])
    results = []
    for what, name in names.items():
        runs = sorted(seconds[name])
        p50, p99 = statistics.median(runs), runs[min(len(runs) - 1, round(0.99 * (len(runs) - 1)))]
        results.append({"what": what, "flushes": len(runs), "p50_ms": round(p50 * 1e3, 1),
                        "p99_ms": round(p99 * 1e3, 1), "p50_ratio": round(p50 / base, 2)})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--from-buckets", type=int, default=8)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--flushes", type=int, default=60)
    parser.add_argument("--flush-rows", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memtier-bench-adopt-") as root:
        results = throughput(Path(root), args)
        latency = flush_latency(Path(root), args)
    latency_columns = ["what", "flushes", "p50_ms", "p99_ms", "p50_ratio"]
    print_table(latency_columns, [[r[k] for k in latency_columns] for r in latency])
    print()
    report("adopt", ["what", "rows", "seconds", "rows_per_s", "ratio", "runs_s"],
           [[r[k] for k in ("what", "rows", "seconds", "rows_per_s", "ratio", "runs_s")] for r in results],
           {"args": vars(args), "results": results, "flush_latency": latency})


if __name__ == "__main__":
    main()
