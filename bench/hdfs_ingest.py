"""Ingest with the WAL on a real HDFS against the HDFS ceiling, beside local disk, in one run.

    .venv/bin/python -m bench.hdfs_ingest [--batches 100] [--rows-per-batch 10000]
        [--buckets 1,16] [--rounds 3]

Starts an HDFS of its own (tests/support/hdfs.py: Hadoop's NameNode and three DataNodes on
loopback, replication 3, 128 MB blocks, their data on this machine's disk) and, on one Ray
runtime, two memtier clusters of one table server each: one with its root and WAL on that
HDFS, one on local disk. Cells, round-robin over ``--rounds`` (each keeps its median run by
rows/s), one client thread writing the same ``bench.batches`` batches, every write waited for
(the machine is shared and HDFS's latency drifts, so every memtier cell is measured right
after a ceiling run of its own, and its ratio is to that run):

* ``hdfs ceiling``: this process appending each batch's Arrow IPC bytes (what its WAL
  record holds) to one HDFS file and hsyncing it, through the client memtier uses
  (hdfs-native), with nothing else: the most a synced HDFS write of that size allows;
* ``memtier hdfs``: a new table of 1 or 16 buckets on the HDFS cluster;
* ``memtier local``: the same on local disk.

Then, once per system and bucket count, the files: every batch written and flushed (base
files), written again as updates and flushed (log files), then compacted, each step timed.
A flush's rows are those its own commits wrote (read back from their commit metadata: a
background flush may have taken some before), so ``flush rows/s`` is rows into Hudi files
per second of the explicit flush; ``compaction rows/s`` is the table's rows per second of
``compact`` (planning, the pool's merge of every slice, its commit).

``vs ceiling`` is the median over the rounds of each run's rows/s divided by that of the
ceiling run just before it (min-max in ``range``). Prints a table; writes
bench/results/hdfs_ingest.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.batches import make_batches, summarize
from bench.common import print_table, report
from bench.ingest import Memtier, write_all
from memtier.cluster import start_local
from memtier.hudi import HudiTable
from tests.support.hdfs import HdfsCluster, run_hdfs


def ipc_bytes(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def ceiling(hdfs: HdfsCluster, batches: Sequence[pa.RecordBatch]) -> dict[str, Any]:
    """Raw hdfs-native appends + hsync of each batch's IPC bytes, one at a time."""
    from hdfs_native import Client, WriteOptions

    payloads = [ipc_bytes(b) for b in batches]
    client = Client(hdfs.uri)
    path = f"/ceiling/{uuid.uuid4().hex}"
    writer = client.create(path, WriteOptions(create_parent=True))
    acks = []
    started = time.monotonic()
    for payload in payloads:
        begin = time.monotonic()
        writer.write(payload)
        writer.hsync()
        acks.append(time.monotonic() - begin)
    seconds = time.monotonic() - started
    writer.close()
    client.delete(path, False)
    return summarize("hdfs ceiling", batches, seconds, acks, buckets="-")


def memtier_cell(memtier: Memtier, batches: Sequence[pa.RecordBatch], buckets: int) -> dict[str, Any]:
    with memtier.table(batches[0].schema, buckets) as name:
        client = memtier.clients[0]
        client.write(name, batches[0].slice(0, 1))  # warm-up (routing, stream): untimed
        seconds, acks, _ = write_all([partial(client.write, name)], batches)
    return summarize(memtier.name, batches, seconds, acks, buckets=buckets)


def flushed_rows(client: Any, name: str, instants: Sequence[str]) -> int:
    """Rows the flush's own commits wrote into files."""
    described = client.describe(name)
    table = HudiTable.open(described["path"], described["storage_options"])
    timeline = table.timeline()
    done = {i.timestamp: i for i in timeline.completed()}
    return sum(stat.num_writes for t in instants if t in done
               for stat in timeline.read_commit_metadata(table.io, table.path, done[t]).write_stats())


def files_cell(memtier: Memtier, batches: Sequence[pa.RecordBatch], buckets: int) -> dict[str, Any]:
    """Flush into base files, flush updates into log files, compact: rows/s of each."""
    client = memtier.clients[0]
    timings: dict[str, Any] = {"system": memtier.name, "buckets": buckets}
    with memtier.table(batches[0].schema, buckets) as name:
        client.set_services(name, {"services.compaction-log-files": "1000000",
                                   "services.compaction-log-fraction": "1e9"})  # only the timed one
        for step in ("base", "log"):
            for batch in batches:
                client.write(name, batch)
            started = time.monotonic()
            instants = client.flush(name)
            seconds = time.monotonic() - started
            rows = flushed_rows(client, name, instants)
            timings[f"flush {step} rows/s"] = round(rows / seconds) if seconds else 0
            timings[f"flush {step} rows"] = rows
        started = time.monotonic()
        request = client.compact(name)
        seconds = time.monotonic() - started
        if request is None or request["state"] != "completed":
            raise RuntimeError(f"the compaction did not complete: {request}")
        total = sum(b.num_rows for b in batches)
        timings["compaction rows/s"] = round(total / seconds)
        timings["compaction s"] = round(seconds, 2)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--rows-per-batch", type=int, default=10_000)
    parser.add_argument("--buckets", default="1,16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="the local cluster's data (default: a temp dir)")
    args = parser.parse_args()
    batches = make_batches(args.batches, args.rows_per_batch)
    buckets = [int(b) for b in args.buckets.split(",")]
    local_root = str(args.dir or Path(tempfile.mkdtemp(prefix="memtier-bench-hdfs-")))
    with run_hdfs() as hdfs:
        on_hdfs = start_local(hdfs.url("memtier"), table_servers=1, storage_options=hdfs.storage_options,
                              config={"cluster.wal-path": hdfs.url("wal")})
        on_disk = start_local(local_root, table_servers=1)
        try:
            systems = [Memtier("memtier hdfs", on_hdfs, 1), Memtier("memtier local", on_disk, 1)]
            cells = {f"{m.name} {b}": partial(memtier_cell, m, batches, b) for m in systems for b in buckets}
            runs: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {key: [] for key in cells}
            for _ in range(args.rounds):
                for key, cell in cells.items():
                    before = ceiling(hdfs, batches)
                    runs[key].append((before, cell()))
            files = [files_cell(m, batches, b) for b in buckets for m in systems]
        finally:
            on_disk.shutdown()
            on_hdfs.shutdown()
    header = ["system", "buckets", "rows/s", "MB/s", "ack p50 ms", "ack p99 ms", "ceiling rows/s",
              "ceiling p50 ms", "vs ceiling", "range"]
    rows = []
    for pairs in runs.values():
        ratios = sorted(cell["rows_per_s"] / before["rows_per_s"] for before, cell in pairs)
        before, cell = sorted(pairs, key=lambda p: p[1]["rows_per_s"])[len(pairs) // 2]
        rows.append([cell["system"], cell["buckets"], cell["rows_per_s"], cell["mb_per_s"], cell["ack_p50_ms"],
                     cell["ack_p99_ms"], before["rows_per_s"], before["ack_p50_ms"],
                     round(statistics.median(ratios), 3), f"{ratios[0]:.2f}-{ratios[-1]:.2f}"])
    report("hdfs_ingest", header, rows, {
        "args": vars(args) | {"dir": local_root},
        "runs": {key: [{"ceiling": b, "memtier": c} for b, c in pairs] for key, pairs in runs.items()},
        "files": files,
    })
    files_header = ["system", "buckets", "flush base rows/s", "flush log rows/s", "compaction rows/s"]
    print()
    print_table(files_header, [[f[c] for c in files_header] for f in files])


if __name__ == "__main__":
    main()
