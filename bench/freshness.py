"""Freshness: from a write's acknowledgement to its row in ``read(latest)`` on another client.

    .venv/bin/python -m bench.freshness [--dir DIR] [--buckets 1] [--rows-per-batch 10000]
        [--sizes 10000,100000,1000000] [--visible-batches 20] [--cost-reads 5]

One table server (``start_local``), the default config (blocks seal after 5 s or 64 MB and
flush every 2 s). The writer is this process; the reader is another process with its own
client, so nothing is shared but the cluster. They run in lockstep, as bench/peers measures
the peers: the writer writes one batch, takes the time its ``write`` returned, sends the
batch's last key to the reader, which polls until a read returns that row and sends back the
time that read returned; only then is the next batch written. Freshness = that time - the
acknowledgement time (``time.monotonic``: one clock for every process of the machine).

The reader polls ``read(table, "latest", filters=[("key", "=", k)])``: read(latest), which
merges every acknowledged row (table-server memory, then the Hudi files), with a filter on
the key, as the peers' readers filter theirs. The filter only shrinks the answer: the table
server still ships all of its unflushed rows and the client merges them, so a poll costs
about what a full read(latest) costs. Both are timed in every phase (median of
``--cost-reads`` reads, before the lockstep), because freshness can be no better than one read.

Phases, each on a new table: for each ``--sizes`` value the table is filled with that many
rows (untimed; nothing is flushed on purpose, the server flushes on its own schedule), then
``--visible-batches`` lockstep batches run (so the table grows by that many batches during
the phase); a last phase flushes the largest fill first (``Client.flush``), so the reads find
those rows in Hudi files and only the new batches in memory. ``unflushed`` is asked from the
table server before and after the lockstep. Prints a table; writes bench/results/freshness.json.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.batches import last_key, make_batches, percentiles_ms
from bench.ceiling import scratch_dir
from bench.common import report
from memtier import Client
from memtier.tableserver.service import TableServerProxy

VISIBLE_DEADLINE_S = 60.0
HEADER = ["phase", "rows", "unflushed", "read(latest) ms", "filtered read ms",
          "visible p50 ms", "visible p99 ms", "polls max", "rows after", "unflushed after"]


class Reader:
    """A reader process with its own client of the cluster at ``address``."""

    def __init__(self, address: str) -> None:
        context = mp.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process: BaseProcess = context.Process(
            target=_reader_main, args=(address, child), daemon=True)
        self._process.start()

    def find(self, table: str, key: int, *, ts: int = 0, how: str = "read") -> tuple[float, int, float]:
        """Poll until ``key`` is read with a ``ts`` of at least ``ts``: (time that read
        returned, polls, that read's seconds). ``how``: ``read`` (read(latest) filtered on
        the key) or ``lookup`` (``Client.lookup``)."""
        self._conn.send(("find", table, (key, ts, how)))
        seen, polls, read_s = self._conn.recv()
        if seen is None:
            raise TimeoutError(f"key {key} not visible after {VISIBLE_DEADLINE_S} s ({polls} polls)")
        return seen, polls, read_s

    def read_cost(self, table: str, key: int, reads: int) -> dict[str, float]:
        """Median milliseconds of a full read(latest) and of one filtered on ``key``."""
        self._conn.send(("cost", table, (key, reads)))
        return self._conn.recv()

    def close(self) -> None:
        if self._process.is_alive():
            self._conn.send(None)
            self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.terminate()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reader_main(address: str, conn: Connection) -> None:
    import memtier

    client = memtier.connect(address)

    def filtered(table: str, key: int) -> pa.Table:
        return client.read(table, "latest", filters=[("key", "=", key)])

    def looked_up(table: str, key: int) -> pa.Table:
        return client.lookup(table, [key], columns=["key", "ts"])

    while (message := conn.recv()) is not None:
        kind, table, arg = message
        if kind == "find":
            key, ts, how = arg
            conn.send(_poll(partial(looked_up if how == "lookup" else filtered, table, key), ts))
        else:
            key, reads = arg
            conn.send({"full_ms": _median_ms(partial(client.read, table, "latest"), reads),
                       "filtered_ms": _median_ms(partial(filtered, table, key), reads)})


def _poll(read: Callable[[], pa.Table], ts: int) -> tuple[float | None, int, float]:
    deadline = time.monotonic() + VISIBLE_DEADLINE_S
    polls, read_s = 0, 0.0
    while time.monotonic() < deadline:
        begin = time.monotonic()
        got = read()
        found = got.num_rows > 0 and max(got.column("ts").to_pylist()) >= ts
        polls += 1
        read_s = time.monotonic() - begin
        if found:
            return time.monotonic(), polls, read_s
    return None, polls, read_s


def _median_ms(fn: Callable[[], object], reads: int) -> float:
    times = []
    for _ in range(reads):
        begin = time.perf_counter()
        fn()
        times.append(time.perf_counter() - begin)
    return round(statistics.median(times) * 1000, 2)


def lockstep(client: Client, reader: Reader, table: str,
             batches: Sequence[pa.RecordBatch | pa.Table], *, how: str = "read") -> dict[str, Any]:
    """Write ``batches`` one at a time, each only once the reader saw the one before (its
    last row: that key with that ts or newer, read ``how``; see :meth:`Reader.find`)."""
    latencies, polls, reads = [], [], []
    for batch in batches:
        client.write(table, batch)
        acked = time.monotonic()
        ts = int(batch.column("ts")[-1].as_py())
        seen, count, read_s = reader.find(table, last_key(batch), ts=ts, how=how)
        latencies.append(seen - acked)
        polls.append(count)
        reads.append(read_s)
    return {"visible_batches": len(batches), **percentiles_ms("visible", latencies),
            **percentiles_ms("visible_read", reads), "visible_polls_max": max(polls)}


def unflushed_rows(client: Client, table: str) -> int:
    """Rows of ``table`` the table servers hold unflushed now (asked directly: the master's
    copy of their status is up to a heartbeat old)."""
    servers = client.status()["servers"].values()
    return sum(TableServerProxy(s["location"]).status()["tables"].get(table, {})
               .get("unflushed_rows", 0) for s in servers)


def phase(client: Client, reader: Reader, table: str, fill: Sequence[pa.RecordBatch],
          visible: Sequence[pa.RecordBatch], *, flush: bool, cost_reads: int) -> dict[str, Any]:
    """One lockstep phase on ``table`` after writing ``fill`` (and flushing it, with ``flush``)."""
    for batch in fill:
        client.write(table, batch)
    if flush:
        client.flush(table)
    before = {"rows_before": sum(b.num_rows for b in fill),
              "unflushed_before": unflushed_rows(client, table)}
    cost = reader.read_cost(table, last_key(fill[-1]), cost_reads)
    step = lockstep(client, reader, table, visible)
    return {**before, **cost, **step, "unflushed_after": unflushed_rows(client, table)}


def run(address: str, client: Client, batches: Sequence[pa.RecordBatch], sizes: Sequence[int],
        visible: int, buckets: int, cost_reads: int) -> list[dict[str, Any]]:
    """A new table per phase: each size left to the server's flushes, then the largest
    flushed first."""
    rows_per_batch = batches[0].num_rows
    phases = [(f"{size:,} rows", size, False) for size in sizes]
    phases.append((f"{max(sizes):,} rows, flushed", max(sizes), True))
    results = []
    with Reader(address) as reader:
        for i, (name, size, flush) in enumerate(phases):
            table = f"fresh{i}"
            client.create_table(table, batches[0].schema, record_key="key", ordering_field="ts",
                                buckets=buckets)
            fill = max(1, size // rows_per_batch)
            try:
                results.append({"phase": name, **phase(
                    client, reader, table, batches[:fill], batches[fill:fill + visible],
                    flush=flush, cost_reads=cost_reads)})
            finally:
                client.drop_table(table, purge=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the cluster keeps its tables and WAL (default: a temporary "
                        "directory under /tmp, removed after)")
    parser.add_argument("--buckets", type=int, default=1)
    parser.add_argument("--rows-per-batch", type=int, default=10_000)
    parser.add_argument("--sizes", default="10000,100000,1000000",
                        help="rows in the table before each lockstep phase")
    parser.add_argument("--visible-batches", type=int, default=20)
    parser.add_argument("--cost-reads", type=int, default=5,
                        help="reads timed (median) for the read cost of each phase")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]

    from memtier.cluster import start_local

    batches = make_batches(max(sizes) // args.rows_per_batch + args.visible_batches,
                           args.rows_per_batch)
    load_before = os.getloadavg()
    with scratch_dir(args.dir) as root, start_local(str(root / "memtier"), table_servers=1) as cluster:
        results = run(cluster.address, cluster.client(), batches, sizes, args.visible_batches,
                      args.buckets, args.cost_reads)
    rows = [[r["phase"], r["rows_before"], r["unflushed_before"], r["full_ms"], r["filtered_ms"],
             r["visible_p50_ms"], r["visible_p99_ms"], r["visible_polls_max"],
             r["rows_before"] + r["visible_batches"] * args.rows_per_batch, r["unflushed_after"]]
            for r in results]
    report("freshness", HEADER, rows, {
        "buckets": args.buckets,
        "rows_per_batch": args.rows_per_batch,
        "reader": "another process; read(latest) filtered on the batch's last key",
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "results": results,
    })


if __name__ == "__main__":
    main()
