"""Lookups at any table size: ``client.lookup`` latency and ack-to-visible by lookup with
10k, 1M and 10M rows already flushed into Hudi files.

    .venv/bin/python -m bench.lookup [--dir DIR] [--sizes 10000,1000000,10000000]
        [--buckets 4] [--partitions 5] [--lookups 200] [--baseline-lookups 5]
        [--visible-batches 100] [--rows-per-batch 1000]

Each size gets a new table of the demo's shape: ``--buckets`` file groups in each of
``--partitions`` partitions, the partition (``city``) a function of the key, so a lookup
gives the key alone and every partition's slice of the key's bucket is asked. It is
filled with that many rows (bench/common's 5 columns plus ``city``), one Hudi commit per
partition through :class:`memtier.HudiTable`: the base files a first flush writes
(sorted by key, row groups of 16,384 rows), then served by a one-server cluster
(``register_table``; ``services.workers=0``: no compaction during the run). Then:

* **lookup**: ``--lookups`` calls of ``client.lookup(table, [k])`` for random keys of
  the table, from this process; keys are random, so the first touch of each file part
  (footer, a row group's keys) is in the figures;
* **baseline** (same run, same files): what a lookup's file part cost before, reading
  the key's file slices whole: pyarrow reads the base file of the key's bucket in every
  partition (the table's columns) and filters it; median of ``--baseline-lookups``;
* **visible**: the lockstep of bench/freshness with ``lookup`` as the reader: this
  process upserts ``--rows-per-batch`` random existing keys with a new ts, another
  process (its own client) polls ``lookup`` of the batch's last key until it returns
  that ts; ack-to-visible p50/p99 and the successful lookup's own time. The server
  flushes on its own schedule meanwhile, so lookups also read fresh log files.

Prints a table; writes bench/results/lookup.json (with the load average before and after).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.batches import percentiles_ms
from bench.ceiling import scratch_dir
from bench.common import bench_table, report
from bench.freshness import Reader, lockstep
from memtier import Client, HudiTable
from memtier.hudi.filenames import bucket_or_none
from memtier.hudi.keys import KeyColumns

CITIES = np.array(["amsterdam", "berlin", "lisbon", "oslo", "rome", "paris", "madrid", "vienna"])
HEADER = ["rows flushed", "load s", "lookup p50 ms", "lookup p99 ms", "baseline p50 ms",
          "visible p50 ms", "visible p99 ms", "visible lookup p99 ms", "polls max"]


def rows_of(keys: np.ndarray, partitions: int, *, ts: int, seed: int) -> pa.Table:
    """Bench rows of ``keys`` with ``ts``, partitioned by ``city`` = a function of the key."""
    table = bench_table(len(keys), seed=seed, keys=keys, ts=ts)
    return table.append_column("city", pa.array(CITIES[keys % partitions]))


def load(path: str, rows: int, buckets: int, partitions: int) -> HudiTable:
    """A table of ``rows`` keys in base files: one commit per partition (its rows alone)."""
    schema = rows_of(np.arange(1), partitions, ts=1, seed=0).schema
    table = HudiTable.create(path, schema, record_key="key", ordering_field="ts",
                             partition_fields="city", buckets=buckets)
    for p in range(partitions):
        table.write(rows_of(np.arange(p, rows, partitions, dtype=np.int64), partitions, ts=1, seed=p))
    return table


def lookups(client: Client, name: str, keys: np.ndarray) -> list[float]:
    """Seconds of each ``lookup`` of one key; each must find its row."""
    seconds = []
    for key in keys.tolist():
        begin = time.perf_counter()
        found = client.lookup(name, [key])
        seconds.append(time.perf_counter() - begin)
        assert found.num_rows == 1, (key, found)
    return seconds


def whole_slices(table: HudiTable, keys: np.ndarray, buckets: int) -> list[float]:
    """Seconds of each key read the old way: the key's bucket's base files read whole
    (every partition: the key alone does not name one), then filtered."""
    slices = table.file_slices()
    columns = table.schema.names
    seconds = []
    for key in keys.tolist():
        begin = time.perf_counter()
        bucket = int(KeyColumns.of(pa.table({"key": [key]}), ["key"]).bucket_ids(buckets)[0])
        paths = [s.base_file_path(table.path) for s in slices if bucket_or_none(s.file_id) == bucket]
        found = sum(pq.read_table(p, columns=columns).filter(pc.field("key") == key).num_rows
                    for p in paths if p is not None)
        seconds.append(time.perf_counter() - begin)
        assert found == 1, (key, found)
    return seconds


def phase(client: Client, reader: Reader, root: Path, size: int, args: argparse.Namespace) -> dict[str, Any]:
    """One size: load, register, time lookups, the baseline and the lockstep."""
    name = f"lookup{size}"
    begin = time.perf_counter()
    table = load(str(root / name), size, args.buckets, args.partitions)
    load_s = time.perf_counter() - begin
    client.register_table(name, table.path)
    rng = np.random.default_rng(size)
    client.lookup(name, [0])  # each client learns the table (routing, metadata) once
    reader.find(name, 0, ts=1, how="lookup")
    looked = lookups(client, name, rng.integers(0, size, args.lookups))
    baseline = whole_slices(table, rng.integers(0, size, args.baseline_lookups), args.buckets)
    batches = [rows_of(rng.integers(0, size, args.rows_per_batch), args.partitions, ts=2 + i, seed=i)
               for i in range(args.visible_batches)]
    visible = lockstep(client, reader, name, batches, how="lookup")
    client.drop_table(name)
    return {"rows_flushed": size, "load_s": round(load_s, 1), **percentiles_ms("lookup", looked),
            **percentiles_ms("baseline", baseline), **visible}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the cluster and tables live (default: a temporary directory, removed after)")
    parser.add_argument("--sizes", default="10000,1000000,10000000", help="rows flushed before each phase")
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=5, choices=range(1, len(CITIES) + 1))
    parser.add_argument("--lookups", type=int, default=200)
    parser.add_argument("--baseline-lookups", type=int, default=5)
    parser.add_argument("--visible-batches", type=int, default=100)
    parser.add_argument("--rows-per-batch", type=int, default=1000)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]

    from memtier.cluster import start_local

    load_before = os.getloadavg()
    results = []
    with scratch_dir(args.dir) as root, start_local(str(root / "memtier"), table_servers=1,
                                                    config={"services.workers": "0"}) as cluster:
        with Reader(cluster.address) as reader:
            client = cluster.client()
            for size in sizes:
                results.append(phase(client, reader, root, size, args))
    rows = [[f"{r['rows_flushed']:,}", r["load_s"], r["lookup_p50_ms"], r["lookup_p99_ms"], r["baseline_p50_ms"],
             r["visible_p50_ms"], r["visible_p99_ms"], r["visible_read_p99_ms"], r["visible_polls_max"]]
            for r in results]
    report("lookup", HEADER, rows, {
        "buckets": args.buckets,
        "partitions": args.partitions,
        "rows_per_batch": args.rows_per_batch,
        "lookups": args.lookups,
        "baseline": "pyarrow reads the key's bucket's base file in every partition whole, then filters",
        "visible_reader": "another process; client.lookup of the batch's last key until its ts shows",
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "results": results,
    })


if __name__ == "__main__":
    main()
