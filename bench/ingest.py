"""Write-tier ingest in one run: memtier through the client and Flight, its ceiling, the peers.

    .venv/bin/python -m bench.ingest [--dir DIR] [--batches 200] [--rows-per-batch 10000]
        [--threads 4] [--buckets 1,4,16] [--rounds 3] [--paced-seconds 10]
        [--budget 64MB] [--budget-factor 10]
        [--drain-seconds 120] [--peer-batches 100] [--visible-batches 20]
        [--pk-python-batches 30] [--no-peers] [--memory-only]

Same batches (``bench.batches.make_batches``: 5 columns, 10,000 rows), same disk, one run:

1. peers (first, before Ray starts): deltalake appends and pypaimon commits in their own venv
   (``bench/peers_report.py``), ``--peer-batches`` ingest batches then ``--visible-batches``
   write-to-visible batches in lockstep with a reader process;
2. memtier: ``start_local`` with one table server, default config (every write synced,
   blocks sealed after 64 MB or 5 s, sealed blocks flushed every 2 s on the same 2 cores).
   Each cell is a new table of 1, 4 or 16 buckets written by 1 or ``--threads`` client
   threads, each with its own client (as separate writers would be), every write waited
   for; the table is dropped (purged) after the cell. ``memtier-noflush`` is a second
   cluster on the same Ray runtime whose blocks neither age nor flush during a cell: the
   write path alone. ``ts cpu ms`` is the table server process's CPU time per batch (all
   of its threads: Flight, WAL, flushes);
3. the ceiling (``bench/ceiling.py``): this process appending and syncing the batches itself
   (disk-only), and one Flight ``do_put`` stream into a bare process that appends and
   fdatasyncs each batch, with 1 batch in flight (for 1 client thread) and ``--threads``
   (for ``--threads`` client threads). ``vs flight`` divides by the ceiling of the same
   concurrency, ``vs disk`` by disk-only.
   Rounds go round-robin over the memtier and ceiling cells, so every cell sees the same
   spells of noise; each cell keeps its median run by rows/s;
4. paced: each cluster's best cell (buckets, threads) at half its rate for
   ``--paced-seconds`` (long enough for blocks to seal by age and flush), batches due on a
   fixed schedule: ack latency p50/p99 and the rate reached; first the floor under it, this
   process appending and fdatasyncing the same batches on the same schedule (disk-only).
   Each paced run starts after a 3 s pause;
5. memory: a third cluster whose table server has ``tableserver.memory-budget=--budget``
   ingests ``--budget-factor`` times that (the batches cycled) and then waits until its
   flushes have caught up, while a sampler asks the table server for ``memory_used`` and
   its unflushed bytes, and reads the RSS of the table server and of its flush worker,
   every 10 ms (``RSS idle``: both after a one-row write and flush, before the ingest;
   ``--memory-only`` runs this test alone, with 1 bucket);
6. visibility for the comparison: after a ``--peer-batches`` ingest, ``--visible-batches``
   lockstep batches with a reader process, as for the peers (``bench/freshness.py``).

Prints the paced, memory and comparison tables; writes bench/results/ingest.json.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.batches import arrow_bytes, digest, make_batches, percentiles_ms, summarize
from bench.ceiling import (
    SyncedFile,
    device_of,
    disk_ceiling,
    flight_ceiling,
    median_run,
    scratch_dir,
)
from bench.common import cpu_seconds, positive_seconds, print_table, report
from bench.freshness import Reader, phase
from bench.peers_report import peer_results
from memtier.cluster import LocalCluster, start, start_local
from memtier.tableserver.service import TableServerProxy

HEADER = ["system", "buckets", "threads", "batches", "rows/s", "MB/s", "vs flight", "vs disk",
          "ack p50 ms", "ack p99 ms", "visible p50 ms", "visible p99 ms", "ts cpu ms"]
SAMPLE_EVERY_S = 0.01
#: A pause before each paced run, so what the run before left (write-back, a flush) settles.
SETTLE_S = 3.0
DEFERRED = "memtier-noflush"
#: The extra clusters measure ingest only and start no table-service pool: each pool
#: reserves a CPU, and three would not fit a 2-CPU machine's Ray.
NO_POOL = {"services.workers": "0"}
#: The write path alone: no block seals by age, no flushes during a cell (and room for a
#: whole paced run in memory).
FLUSH_DEFERRED = {"tableserver.block-max-age": "1h", "tableserver.flush-interval": "1h",
                  "tableserver.memory-budget": "4GB"}


def cpu_ticks() -> tuple[int, int]:
    """(steal, total) clock ticks of the machine so far: the share the hypervisor took."""
    ticks = [int(t) for t in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return ticks[7], sum(ticks)


def rss_bytes(pid: int) -> dict[str, int]:
    """Resident bytes of process ``pid``: anonymous (heap) and file-backed (mapped files)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {kind: int(fields[f"Rss{kind.capitalize()}"].split()[0]) * 1024 for kind in ("anon", "file")}


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (a table server's: its flush worker)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:  # the thread ended
            pass
    return found


def process_rss(pid: int) -> dict[str, int]:
    """Resident bytes of a table server with its flush worker (absent before its first
    flush): ``anon``/``file`` of the server, ``worker`` of the worker, ``rss`` in all."""
    server = rss_bytes(pid)
    worker = {"anon": 0, "file": 0}
    for child in children(pid):
        try:
            worker = {k: v + worker[k] for k, v in rss_bytes(child).items()}
        except FileNotFoundError:  # it exited meanwhile
            pass
    return {**server, "worker_anon": worker["anon"], "worker_file": worker["file"],
            "worker": sum(worker.values()), "rss": sum(server.values()) + sum(worker.values())}


def write_all(writers: Sequence[Callable[[pa.RecordBatch], object]],
              batches: Sequence[pa.RecordBatch],
              interval: float | None = None) -> tuple[float, list[float], float]:
    """Batch i written by writer ``i % len(writers)``, each on its own thread, every write
    waited for; with ``interval``, batch i is not sent before ``i * interval`` seconds.

    Returns wall seconds, each write's ack latency (send to return) and the latest a send
    started after its due time.
    """
    acks: list[float] = []
    late = [0.0]
    origin = [0.0]
    lock = threading.Lock()
    start_line = threading.Barrier(len(writers) + 1)

    def run(slot: int) -> None:
        mine, lateness = [], 0.0
        start_line.wait()
        for i in range(slot, len(batches), len(writers)):
            if interval is not None:
                wait = origin[0] + i * interval - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                lateness = max(lateness, -wait)
            begin = time.monotonic()
            writers[slot](batches[i])
            mine.append(time.monotonic() - begin)
        with lock:
            acks.extend(mine)
            late[0] = max(late[0], lateness)

    threads = [threading.Thread(target=run, args=(slot,)) for slot in range(len(writers))]
    for thread in threads:
        thread.start()
    origin[0] = time.monotonic()
    start_line.wait()
    for thread in threads:
        thread.join()
    return time.monotonic() - origin[0], acks, late[0]


class Memtier:
    """One running cluster with one table server, and clients of it."""

    def __init__(self, name: str, cluster: LocalCluster, threads: int) -> None:
        self.name = name
        self.cluster = cluster
        self.clients = [cluster.client() for _ in range(threads)]
        self.server_pid = cluster.pids()["ts-0"]
        location = self.clients[0].status()["servers"]["ts-0"]["location"]
        self.server = TableServerProxy(location, token=cluster.token, tls_ca=cluster.tls_ca)
        self._tables = itertools.count()

    @contextmanager
    def table(self, schema: pa.Schema, buckets: int) -> Iterator[str]:
        """A new table for one cell, dropped with its files and WAL after."""
        name = f"ingest{next(self._tables)}"
        self.clients[0].create_table(name, schema, record_key="key", ordering_field="ts",
                                     buckets=buckets)
        try:
            yield name
        finally:
            self.clients[0].drop_table(name, purge=True)

    def ingest(self, batches: Sequence[pa.RecordBatch], buckets: int, threads: int,
               interval: float | None = None,
               then: Callable[[str], object] | None = None) -> dict[str, Any]:
        """One cell: a new table written by ``threads`` clients (``then(table)`` runs after,
        before the table is dropped); the ``summarize`` dict, raw ack latencies in ``acks``."""
        with self.table(batches[0].schema, buckets) as name:
            for client in self.clients[:threads]:  # warm-up (routing, streams): untimed
                client.write(name, batches[0].slice(0, 1))
            cpu = cpu_seconds(self.server_pid)
            writers = [partial(client.write, name) for client in self.clients[:threads]]
            seconds, acks, late = write_all(writers, batches, interval)
            cpu = cpu_seconds(self.server_pid) - cpu
            if then is not None:
                then(name)
        return summarize(self.name, batches, seconds, acks, buckets=buckets, threads=threads,
                         ts_cpu_ms=round(cpu / len(batches) * 1000, 2),
                         late_max_ms=round(late * 1000, 2), acks=acks)


Cell = Callable[[int], dict[str, Any]]


def memtier_cells(memtier: Memtier, batches: Sequence[pa.RecordBatch], buckets: Sequence[int],
                  threads: int) -> list[Cell]:
    """One cell per bucket count and per 1 or ``threads`` client threads."""
    return [lambda r, b=b, n=n: memtier.ingest(batches, b, n)
            for b in buckets for n in sorted({1, threads})]


def ceiling_cells(batches: Sequence[pa.RecordBatch], root: Path, threads: int) -> list[Cell]:
    """Disk alone, and Flight into a bare receiver with 1 and ``threads`` batches in flight."""
    def flight(window: int) -> Cell:
        return lambda r: {**flight_ceiling(batches, root / f"flight-{window}-{r}.ipc", window),
                          "threads": window}

    return [lambda r: disk_ceiling(batches, root / f"disk-{r}.ipc", 1),
            *(flight(w) for w in sorted({1, threads}))]


def round_robin(cells: Sequence[Cell], rounds: int, root: Path) -> list[dict[str, Any]]:
    """Every cell once per round, rounds in turn; each cell's median run by rows/s."""
    runs: list[list[dict[str, Any]]] = [[] for _ in cells]
    for r in range(rounds):
        for cell, cell_runs in zip(cells, runs, strict=True):
            cell_runs.append(cell(r))
            for leftover in root.glob("*.ipc"):
                leftover.unlink()
    return [median_run(cell_runs) for cell_runs in runs]


def paced(memtier: Memtier, batches: Sequence[pa.RecordBatch], best: dict[str, Any],
          seconds: float) -> dict[str, Any]:
    """``best``'s configuration at half its rate for ``seconds`` (the batches cycled: long
    enough for blocks to seal by age and flush): ack latency p50/p99."""
    rate = best["rows_per_s"] / 2
    cycled, interval = _schedule(batches, rate, seconds)
    time.sleep(SETTLE_S)
    result = memtier.ingest(cycled, best["buckets"], best["threads"], interval)
    return {"system": memtier.name, "buckets": best["buckets"], "threads": best["threads"],
            "target_rows_per_s": round(rate), "rows_per_s": result["rows_per_s"],
            "writes": len(cycled), **percentiles_ms("ack", result["acks"]),
            "late_max_ms": result["late_max_ms"], "ts_cpu_ms": result["ts_cpu_ms"]}


def paced_disk(batches: Sequence[pa.RecordBatch], path: Path, rate: float,
               seconds: float) -> dict[str, Any]:
    """The floor under :func:`paced`: this process appending and fdatasyncing the batches
    on the same schedule (synced pages dropped from the cache, as the WAL does)."""
    cycled, interval = _schedule(batches, rate, seconds)
    time.sleep(SETTLE_S)
    sink = SyncedFile(str(path), drop_cache=True)
    try:
        wall, acks, late = write_all([sink.append], cycled, interval)
    finally:
        sink.close()
        path.unlink()
    rows = sum(b.num_rows for b in cycled)
    return {"system": "disk-only", "buckets": "-", "threads": 1, "target_rows_per_s": round(rate),
            "rows_per_s": round(rows / wall), "writes": len(cycled), **percentiles_ms("ack", acks),
            "late_max_ms": round(late * 1000, 2), "ts_cpu_ms": "-"}


def _schedule(batches: Sequence[pa.RecordBatch], rate: float,
              seconds: float) -> tuple[list[pa.RecordBatch], float]:
    """The batches cycled to last ``seconds`` at ``rate`` rows/s, and the interval between."""
    interval = batches[0].num_rows / rate
    return [batches[i % len(batches)] for i in range(int(seconds / interval))], interval


def memory_bound(cluster: LocalCluster, batches: Sequence[pa.RecordBatch], buckets: int,
                 threads: int, factor: float, drain_s: float) -> dict[str, Any]:
    """Ingest ``factor`` x the table server's budget, then wait (up to ``drain_s``) until
    it has flushed everything; its memory sampled all along."""
    memtier = Memtier("memtier", cluster, threads)
    budget = memtier.server.status()["memory_budget"]
    count = int(factor * budget / (arrow_bytes(batches) / len(batches))) + 1
    cycled = [batches[i % len(batches)] for i in range(count)]
    samples: list[dict[str, int]] = []
    done = threading.Event()
    drained: list[float] = []

    def sample() -> None:
        while not done.wait(SAMPLE_EVERY_S):
            status = memtier.server.status()
            unflushed = sum(t["unflushed_bytes"] for t in status["tables"].values())
            samples.append({"used": status["memory_used"], "unflushed": unflushed,
                            **process_rss(memtier.server_pid)})

    def drain(_table: str) -> None:
        begin = time.monotonic()
        while samples[-1]["unflushed"] and time.monotonic() - begin < drain_s:
            time.sleep(SAMPLE_EVERY_S)
        drained.append(time.monotonic() - begin)

    with memtier.table(batches[0].schema, buckets) as warm:  # the flush worker started
        for _ in range(2):  # a base file, then a log file: both flush paths loaded
            memtier.clients[0].write(warm, batches[0].slice(0, 1000))
            memtier.clients[0].flush(warm)
    idle = process_rss(memtier.server_pid)  # the processes before the ingest
    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        result = memtier.ingest(cycled, buckets, threads, then=drain)
    finally:
        done.set()
        sampler.join()
    status = memtier.server.status()
    result.pop("acks")
    return {**result, "budget": budget, "written_bytes": arrow_bytes(cycled),
            "samples": len(samples), "memory_peak": status["memory_peak"],
            **{f"{k}_max": max(x[k] for x in samples) for k in samples[0]},
            "rss_idle": idle["rss"], "worker_idle": idle["worker"],
            "drain_s": round(drained[0], 2), "drained": not samples[-1]["unflushed"],
            "wal": status["wal"]}


def visibility(memtier: Memtier, batches: Sequence[pa.RecordBatch], visible: int,
               buckets: int) -> dict[str, Any]:
    """As the peers: ingest ``batches``, then ``visible`` more in lockstep with a reader."""
    with memtier.table(batches[0].schema, buckets) as name, Reader(memtier.cluster.address) as reader:
        return phase(memtier.clients[0], reader, name, batches[:-visible], batches[-visible:],
                     flush=False, cost_reads=3)


def table_rows(results: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """The comparison table: ``vs flight`` against the Flight ceiling of the same threads."""
    disk = next(r["rows_per_s"] for r in results if r["system"] == "disk-only")
    flight = {r["threads"]: r["rows_per_s"] for r in results if r["system"].startswith("flight")}
    rows = []
    for r in results:
        ceiling = flight.get(r.get("threads", 0)) if r["system"].startswith("memtier") else None
        rows.append([r["system"], r.get("buckets", "-"), r.get("threads", 1), r["batches"],
                     r["rows_per_s"], r["mb_per_s"],
                     round(r["rows_per_s"] / ceiling, 3) if ceiling else "-",
                     round(r["rows_per_s"] / disk, 3), r["ack_p50_ms"], r["ack_p99_ms"],
                     r.get("visible_p50_ms", "-"), r.get("visible_p99_ms", "-"),
                     r.get("ts_cpu_ms", "-")])
    return rows


MEMORY_HEADER = ["memory: budget MB", "written MB", "rows/s", "memory_used max MB",
                 "memory_peak MB", "peak/budget", "unflushed max MB", "drain s",
                 "RSS anon max MB", "RSS file max MB", "worker RSS max MB", "RSS max MB",
                 "RSS idle MB", "(RSS max - idle)/budget", "ack p50 ms", "ack p99 ms"]


def memory_row(memory: dict[str, Any]) -> list[Any]:
    """RSS is the table server's and its flush worker's together (each max is on its own)."""
    return [memory["budget"] / 1e6, memory["written_bytes"] / 1e6, memory["rows_per_s"],
            memory["used_max"] / 1e6, memory["memory_peak"] / 1e6,
            round(memory["memory_peak"] / memory["budget"], 3),
            memory["unflushed_max"] / 1e6, memory["drain_s"], memory["anon_max"] / 1e6,
            memory["file_max"] / 1e6, memory["worker_max"] / 1e6, memory["rss_max"] / 1e6,
            memory["rss_idle"] / 1e6,
            round((memory["rss_max"] - memory["rss_idle"]) / memory["budget"], 3),
            memory["ack_p50_ms"], memory["ack_p99_ms"]]


def print_memory(memory: dict[str, Any]) -> None:
    print_table(MEMORY_HEADER, [memory_row(memory)])


def memory_only(args: argparse.Namespace, batches: Sequence[pa.RecordBatch]) -> None:
    """Only the memory test (1 bucket, ``--threads`` clients): bench/results/ingest-memory.json."""
    with scratch_dir(args.dir) as root, start_local(
        str(root), table_servers=1, config={"tableserver.memory-budget": args.budget, **NO_POOL}
    ) as cluster:
        memory = memory_bound(cluster, batches, 1, args.threads, args.budget_factor,
                              args.drain_seconds)
    report("ingest-memory", MEMORY_HEADER, [memory_row(memory)], {"memory": memory})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None,
                        help="where everything is written (default: a temporary directory "
                        "under /tmp, removed after)")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rows-per-batch", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=4, help="N concurrent client threads")
    parser.add_argument("--buckets", default="1,4,16", help="bucket counts of the test tables")
    parser.add_argument("--rounds", type=int, default=3, help="runs per cell; the median is kept")
    parser.add_argument("--paced-seconds", type=positive_seconds, default=10.0,
                        help="length of each run at half the peak rate")
    parser.add_argument("--budget", default="64MB", help="memory budget of the memory test")
    parser.add_argument("--budget-factor", type=float, default=10.0)
    parser.add_argument("--drain-seconds", type=float, default=120.0,
                        help="how long the memory test waits for the flushes to catch up")
    parser.add_argument("--peer-batches", type=int, default=100)
    parser.add_argument("--visible-batches", type=int, default=20)
    parser.add_argument("--pk-python-batches", type=int, default=30)
    parser.add_argument("--no-peers", action="store_true", help="skip deltalake and pypaimon")
    parser.add_argument("--memory-only", action="store_true",
                        help="run only the memory test (step 5), with 1 bucket")
    args = parser.parse_args()
    buckets = [int(b) for b in args.buckets.split(",")]
    if args.memory_only:
        memory_only(args, make_batches(args.batches, args.rows_per_batch))
        return

    batches = make_batches(max(args.batches, args.peer_batches + args.visible_batches),
                           args.rows_per_batch)
    ingest_batches = batches[:args.batches]
    visible_batches = batches[:args.peer_batches + args.visible_batches]
    load_before = os.getloadavg()
    ticks_before = cpu_ticks()
    with scratch_dir(args.dir) as root:
        for sub in ("peers", "ceiling", "memtier", "memory"):
            (root / sub).mkdir()
        peers: dict[str, Any] = {"results": [], "versions": {}}
        if not args.no_peers:
            peers = peer_results(root / "peers", args.rows_per_batch, args.peer_batches,
                                 args.visible_batches, args.pk_python_batches)
            if peers["digest"] != digest(batches[:args.peer_batches]):
                raise RuntimeError("the peer venv generated different batches; compare nothing")
        with start_local(str(root / "memtier"), table_servers=1) as cluster:
            memtier = Memtier("memtier", cluster, args.threads)
            deferred = Memtier(DEFERRED, start(str(root / "deferred"), table_servers=1,
                                               config={**FLUSH_DEFERRED, **NO_POOL}), args.threads)
            cells = round_robin([*memtier_cells(memtier, ingest_batches, buckets, args.threads),
                                 *memtier_cells(deferred, ingest_batches, [1], args.threads),
                                 *ceiling_cells(ingest_batches, root / "ceiling", args.threads)],
                                args.rounds, root / "ceiling")
            bests = {m.name: max((c for c in cells if c["system"] == m.name),
                                 key=lambda c: c["rows_per_s"]) for m in (memtier, deferred)}
            floor = paced_disk(ingest_batches, root / "ceiling" / "paced.ipc",
                               bests["memtier"]["rows_per_s"] / 2, args.paced_seconds)
            pace = [floor, *(paced(m, ingest_batches, bests[m.name], args.paced_seconds)
                             for m in (memtier, deferred))]
            best = bests["memtier"]
            best.update(visibility(memtier, visible_batches, args.visible_batches,
                                   best["buckets"]))
            bounded = start(str(root / "memory"), table_servers=1,
                            config={"tableserver.memory-budget": args.budget, **NO_POOL})
            memory = memory_bound(bounded, ingest_batches, best["buckets"], best["threads"],
                                  args.budget_factor, args.drain_seconds)
        where = {"dir": str(root), "device": device_of(root)}
    results = cells + peers["results"]
    for cell in results:
        cell.pop("acks", None)
    print_table(["paced", "buckets", "threads", "target rows/s", "rows/s", "writes",
                 "ack p50 ms", "ack p99 ms", "late max ms", "ts cpu ms"],
                [[p[k] for k in ("system", "buckets", "threads", "target_rows_per_s",
                                 "rows_per_s", "writes", "ack_p50_ms", "ack_p99_ms",
                                 "late_max_ms", "ts_cpu_ms")] for p in pace])
    print()
    print_memory(memory)
    print()
    load_after = os.getloadavg()
    steal, total = (after - before for after, before in zip(cpu_ticks(), ticks_before, strict=True))
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; "
          f"CPU time stolen by the hypervisor during the run: {100 * steal / total:.1f}%\n")
    report("ingest", HEADER, table_rows(results), {
        **where,
        "rows_per_batch": args.rows_per_batch,
        "threads": args.threads,
        "buckets": buckets,
        "rounds": args.rounds,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "steal_pct": round(100 * steal / total, 2),
        "mb": "logical Arrow bytes (RecordBatch.nbytes) / 1e6",
        "peer_versions": peers["versions"],
        "results": results,
        "paced": pace,
        "memory": memory,
    })


if __name__ == "__main__":
    main()
