"""Sustained ingest with flushes under a memory budget: what the flush reads back of the WAL.

    .venv/bin/python -m bench.sustained [--buckets 1,16] [--threads 4] [--batches 1600]
        [--rows-per-batch 10000] [--budget 256MB] [--dir DIR]

One table server (``start_local``, ``tableserver.memory-budget=--budget``, no compaction
pool), default block and flush settings: for each bucket count a new table takes
``--batches`` upserts (bench/batches, cycled over 200 distinct batches) from ``--threads``
client threads as fast as they are acknowledged, so blocks seal by size and flush in
rounds while the writes go on; then one ``flush`` drains the rest. Reported per cell:
rows/s of the writes, the drain's seconds, the flush worker's CPU seconds and the bytes it
read (``/proc/<pid>/io`` ``rchar``: the WAL frames read back; the Hudi files' own reads are
small beside them) against the Arrow bytes written. A flush round that read each write's
record in the WAL once reads about 1x; one that read a file group's rows out of every
write they are part of would read up to once per file group. The baseline in the same
run: this process appending and fdatasyncing the same batches (``bench.ceiling`` disk-only).

Prints a table; writes bench/results/sustained.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.batches import arrow_bytes, make_batches
from bench.ceiling import disk_ceiling
from bench.common import cpu_seconds, report
from bench.ingest import children
from memtier.client import Client
from memtier.cluster import start_local

HEADER = ["system", "buckets", "threads", "batches", "rows/s", "drain s", "worker cpu s", "WAL read GB",
          "written GB", "read / written"]


def read_bytes(pid: int) -> int:
    """Bytes process ``pid`` has read through system calls (``rchar``)."""
    fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return int(fields["rchar"])


def cell(client: Client, clients: list[Client], worker: int, buckets: int, batches: list[Any]) -> list[Any]:
    """One table of ``buckets`` buckets written by every client at once, then drained."""
    name = f"sustained{buckets}"
    client.create_table(name, batches[0].schema, record_key="key", ordering_field="ts", buckets=buckets)
    try:
        client.write(name, batches[0].slice(0, 1))
        client.flush(name)
        cpu, read = cpu_seconds(worker), read_bytes(worker)
        share = len(batches) // len(clients)

        def run(k: int) -> None:
            for batch in batches[k * share:(k + 1) * share]:
                clients[k].write(name, batch)

        threads = [threading.Thread(target=run, args=(k,)) for k in range(len(clients))]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wrote = time.monotonic() - started
        client.flush(name)
        drained = time.monotonic() - started - wrote
        cpu, read = cpu_seconds(worker) - cpu, read_bytes(worker) - read
    finally:
        client.drop_table(name, purge=True)
    rows = share * len(clients) * batches[0].num_rows
    written = arrow_bytes(batches[:share * len(clients)])
    return ["memtier", buckets, len(clients), share * len(clients), round(rows / wrote), round(drained, 2),
            round(cpu, 2), round(read / 1e9, 2), round(written / 1e9, 2), round(read / written, 2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buckets", default="1,16")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--batches", type=int, default=1600)
    parser.add_argument("--rows-per-batch", type=int, default=10_000)
    parser.add_argument("--budget", default="256MB")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    distinct = make_batches(min(200, args.batches), args.rows_per_batch)
    batches = [distinct[i % len(distinct)] for i in range(args.batches)]
    root = Path(tempfile.mkdtemp(prefix="memtier-sustained-", dir=args.dir))
    try:
        disk = disk_ceiling(batches, root / "disk.ipc", 1)
        (root / "disk.ipc").unlink()
        rows: list[list[Any]] = [["disk-only", "-", 1, len(batches), disk["rows_per_s"], "-", "-", "-",
                                  round(arrow_bytes(batches) / 1e9, 2), "-"]]
        cluster = start_local(str(root / "cluster"), table_servers=1,
                              config={"tableserver.memory-budget": args.budget, "services.workers": "0"})
        try:
            clients = [cluster.client() for _ in range(args.threads)]
            server = cluster.pids()["ts-0"]
            clients[0].create_table("warm", batches[0].schema, record_key="key", ordering_field="ts", buckets=1)
            clients[0].write("warm", batches[0].slice(0, 1))
            clients[0].flush("warm")  # the flush worker started
            [worker] = children(server)
            for buckets in (int(b) for b in args.buckets.split(",")):
                rows.append(cell(clients[0], clients, worker, buckets, batches))
        finally:
            cluster.shutdown()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report("sustained", HEADER, rows, {"budget": args.budget, "load_after": os.getloadavg()})


if __name__ == "__main__":
    main()
