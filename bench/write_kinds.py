"""Deletes and append-only tables against upserts, through the client, in one run.

    .venv/bin/python -m bench.write_kinds [--batches 60] [--rows-per-batch 10000]
        [--buckets 1,4] [--threads 1] [--rounds 3]

One ``start_local`` cluster with one table server (default config: every write synced;
no table-service pool). Per round and bucket count, on new tables:

* ``upsert``: the ingest workload (``bench.batches.make_batches``) into a keyed table
  (record key ``key``, ordering ``ts``): the baseline;
* ``delete``: then a stream deleting the same keys, batch by batch (``client.delete``
  with the key and an ordering value), into that table;
* ``append-only``: the same batches into a table with no record key.

Rounds go round-robin over the cells; each cell keeps its median run by rows/s. ``vs
upsert`` divides by the upsert cell of the same bucket count and round (MB/s counts the
upsert batches' bytes for every kind: the same rows). Prints the table and writes
bench/results/write_kinds.json.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.batches import make_batches, summarize
from bench.common import report
from bench.ingest import write_all
from memtier.cluster import start_local

HEADER = ["kind", "buckets", "threads", "batches", "rows/s", "MB/s", "vs upsert", "ack p50 ms", "ack p99 ms"]


def delete_batches(batches: Sequence[pa.RecordBatch]) -> list[pa.Table]:
    """The keys of each batch, with an ordering value above the upsert's: deletes that win."""
    return [pa.table({"key": b.column("key"), "ts": pc.add(b.column("ts"), 1)}) for b in batches]


def one_round(clients: Sequence[Any], batches: Sequence[pa.RecordBatch], buckets: int,
              names: Any) -> dict[str, dict[str, Any]]:
    """The three cells of one round: each on new tables, dropped afterwards."""
    schema = batches[0].schema
    admin = clients[0]
    keyed, keyless = f"keyed{next(names)}", f"keyless{next(names)}"
    admin.create_table(keyed, schema, record_key="key", ordering_field="ts", buckets=buckets)
    admin.create_table(keyless, schema, record_key=None, ordering_field="ts", buckets=buckets)

    def cell(kind: str, write: Callable[[Any, str, Any], object], table: str,
             data: Sequence[Any]) -> dict[str, Any]:
        for client in clients:  # warm-up (routing, streams): untimed
            client.write(table, batches[0].slice(0, 1))
        writers = [partial(write, client, table) for client in clients]
        seconds, acks, _ = write_all(writers, data)
        return summarize(kind, batches, seconds, acks, buckets=buckets, threads=len(clients))

    try:
        upsert = cell("upsert", lambda c, t, b: c.write(t, b), keyed, batches)
        delete = cell("delete", lambda c, t, b: c.delete(t, b), keyed, delete_batches(batches))
        append = cell("append-only", lambda c, t, b: c.write(t, b), keyless, batches)
    finally:
        admin.drop_table(keyed, purge=True)
        admin.drop_table(keyless, purge=True)
    return {"upsert": upsert, "delete": delete, "append-only": append}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--rows-per-batch", type=int, default=10_000)
    parser.add_argument("--buckets", default="1,4")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    batches = make_batches(args.batches, args.rows_per_batch)
    buckets = [int(b) for b in args.buckets.split(",")]
    root = tempfile.mkdtemp(prefix="memtier-write-kinds-")
    cluster = start_local(root, table_servers=1, config={"services.workers": "0"})
    names = itertools.count()
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    try:
        clients = [cluster.client() for _ in range(args.threads)]
        for _ in range(args.rounds):
            for b in buckets:
                cells = one_round(clients, batches, b, names)
                for kind, result in cells.items():
                    result["vs_upsert"] = result["rows_per_s"] / cells["upsert"]["rows_per_s"]
                    runs.setdefault((kind, b), []).append(result)
    finally:
        cluster.shutdown()
        shutil.rmtree(root, ignore_errors=True)
    rows = []
    for (kind, b), results in runs.items():
        median = sorted(results, key=lambda r: r["rows_per_s"])[len(results) // 2]
        rows.append([kind, b, args.threads, args.batches, round(median["rows_per_s"]),
                     round(median["mb_per_s"], 1), round(statistics.median(r["vs_upsert"] for r in results), 2),
                     median["ack_p50_ms"], median["ack_p99_ms"]])
    report("write_kinds", HEADER, rows, {"args": vars(args), "root": root})


if __name__ == "__main__":
    main()
