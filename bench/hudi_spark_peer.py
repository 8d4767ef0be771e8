"""Apache Hudi's own Spark writer beside memtier, same batches, same table layout, one run.

    .venv/bin/python -m bench.hudi_spark_peer [--dir DIR] [--batches 30] [--rows-per-batch 10000]
        [--visible-batches 10] [--buckets 2]

The workload of bench/ingest.py (``bench.batches``: 5 columns, new keys every batch) into a
merge-on-read table with a bucket index of ``--buckets`` buckets, upserts keyed on ``key``
and ordered by ``ts``, no partitions, Hudi table version 6 (memtier's layout):

1. Hudi on Spark (Hudi 1.0.2, Spark 3.5 ``local[2]``, one worker process made by
   ``tests/support/hudi_spark.py``): every batch is loaded into Spark's memory first and
   a one-row write creates the table (untimed, as memtier's one-row warm-up), then written by ``df.write.format("hudi")`` upserts, one deltacommit each,
   back to back; ``ack`` is the write call. Hudi's metadata table is off (memtier's tables
   have none; with it every commit also writes the metadata table). Then
   ``--visible-batches`` more, each followed by a fresh Spark read filtered on the batch's
   last key until it returns the row: ``visible`` runs from the write call's return to
   that read's (a Hudi commit is visible once its call returns, so this is one query).
   Spark is stopped before memtier starts.
2. memtier: ``start_local`` with one table server and no table-service pool; the same
   batches through the client, every write waited for (bench/ingest.py's cell, one
   thread), then ``--visible-batches`` in lockstep with a reader process (bench/freshness.py).

Prints one table and writes bench/results/hudi_spark_peer.json; ``vs hudi`` is a system's
rows/s over Hudi's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.batches import last_key, make_batches, percentiles_ms, summarize
from bench.ceiling import scratch_dir
from bench.common import report
from bench.ingest import NO_POOL, Memtier, visibility
from memtier.cluster import start_local
from tests.support.hudi_spark import HudiSpark, writer_options

HEADER = ["system", "batches", "rows/s", "MB/s", "vs hudi", "ack p50 ms", "ack p99 ms",
          "visible p50 ms", "visible p99 ms"]
VISIBLE_DEADLINE_S = 120.0


def hudi_spark(root: Path, batches: Sequence[pa.RecordBatch], visible: int, buckets: int) -> dict[str, Any]:
    """Hudi's Spark upserts of ``batches`` (the last ``visible`` in lockstep with a read)."""
    path = str(root / "hudi")
    options = writer_options("peer", "key", "ts", buckets=buckets, table_version=6,
                             **{"hoodie.metadata.enable": "false"})
    with HudiSpark(root) as spark:
        for i, batch in enumerate(batches):
            source = str(root / f"batch-{i}.parquet")
            pq.write_table(pa.Table.from_batches([batch]), source)
            spark.request("load", name=f"b{i}", input=source)
        warm_up = str(root / "warm-up.parquet")  # creates the table: untimed, as memtier's warm-up
        pq.write_table(pa.Table.from_batches([batches[0].slice(0, 1)]), warm_up)
        spark.request("write", path=path, options=options, input=warm_up)
        ingest = batches[:-visible]
        start = time.perf_counter()
        acks = [spark.request("write", path=path, options=options, name=f"b{i}")["seconds"]
                for i in range(len(ingest))]
        seconds = time.perf_counter() - start
        latencies = []
        for i in range(len(ingest), len(batches)):
            written = spark.request("write", path=path, options=options, name=f"b{i}")
            latencies.append(_seen(spark, path, last_key(batches[i])) - written["returned"])
        result = summarize("hudi-spark", ingest, seconds, acks, buckets=buckets, **spark.versions,
                           **percentiles_ms("visible", latencies), visible_batches=visible)
    return result


def _seen(spark: HudiSpark, path: str, key: int) -> float:
    """When a fresh Hudi read first returned ``key`` (``time.monotonic``)."""
    deadline = time.monotonic() + VISIBLE_DEADLINE_S
    while time.monotonic() < deadline:
        answer = spark.request("count", path=path, where=f"key = {key}")
        if answer["rows"]:
            return answer["returned"]
    raise TimeoutError(f"key {key} not visible to Hudi after {VISIBLE_DEADLINE_S} s")


def memtier(root: Path, batches: Sequence[pa.RecordBatch], visible: int, buckets: int) -> dict[str, Any]:
    """The same batches through memtier's client (one thread), then the lockstep."""
    with start_local(str(root / "memtier"), table_servers=1, config=NO_POOL) as cluster:
        tier = Memtier("memtier", cluster, threads=1)
        result = tier.ingest(batches[:-visible], buckets, threads=1)
        result.pop("acks")
        result.update(visibility(tier, batches, visible, buckets))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None,
                        help="where tables go (default: a temporary dir under /tmp, removed after)")
    parser.add_argument("--batches", type=int, default=30, help="ingest batches (visible ones extra)")
    parser.add_argument("--rows-per-batch", type=int, default=10_000)
    parser.add_argument("--visible-batches", type=int, default=10)
    parser.add_argument("--buckets", type=int, default=2)
    args = parser.parse_args()

    batches = make_batches(args.batches + args.visible_batches, args.rows_per_batch)
    load_before = os.getloadavg()
    with scratch_dir(args.dir) as root:
        (root / "hudi").mkdir()
        (root / "memtier").mkdir()
        results = [hudi_spark(root / "hudi", batches, args.visible_batches, args.buckets),
                   memtier(root / "memtier", batches, args.visible_batches, args.buckets)]
    hudi = results[0]["rows_per_s"]
    rows = [[r["system"], r["batches"], r["rows_per_s"], r["mb_per_s"], round(r["rows_per_s"] / hudi, 2),
             r["ack_p50_ms"], r["ack_p99_ms"], r["visible_p50_ms"], r["visible_p99_ms"]] for r in results]
    report("hudi_spark_peer", HEADER, rows, {
        "rows_per_batch": args.rows_per_batch, "buckets": args.buckets,
        "load_before": load_before, "load_after": os.getloadavg(), "results": results,
    })


if __name__ == "__main__":
    main()
