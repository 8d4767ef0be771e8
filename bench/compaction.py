"""Compaction throughput against a plain Parquet read + write of the same rows, and how
stale the read-optimized view (base files only: what Trino's and Presto's Hudi
connectors read of a merge-on-read table) is under the default table-service policy.

    .venv/bin/python -m bench.compaction [--rows 2000000] [--buckets 4] [--update-fraction 0.1]
        [--log-files 2] [--repeat 3] [--staleness-seconds 120] [--warmup 20] [--rate 20000]
        [--peak-seconds 10] [--peak-compact-rows 4000000] [--peak-rounds 3] [--service-cpus auto]
        [--log-block-format avro|parquet]

1. compaction: a table of ``--rows`` rows in ``--buckets`` file groups (base files), then
   ``--update-fraction`` of its keys updated in ``--log-files`` deltacommits (Avro log
   blocks, the default), so each slice's logs hold that fraction of its rows as updates.
   Timed: one compaction of every slice exactly as a pool worker runs it (plan, requested
   and inflight on the timeline, every new base file written durably, completed). The
   baseline, same run, same rows: ``pyarrow.parquet`` reads each base file and writes it
   again (the files in parallel, as compaction does its slices). Median of ``--repeat``,
   each on a fresh table.
2. staleness: ``start_local`` (one table server, the pool's one worker, every setting at
   its default) while a client writes ``--rate`` rows/s of fresh keys, each batch stamped
   with its acknowledgement time; every second a sampler reads the read-optimized view and
   finds the oldest acknowledged batch not yet (wholly) in it. Staleness = now minus that
   batch's acknowledgement: how far the base files lag what writers were told is durable.
   Samples from the first ``--warmup`` seconds are dropped.
3. peak ingest with and without a compaction: in the same cluster, 4 client threads write
   10,000-row batches of fresh keys as fast as they are acknowledged for ``--peak-seconds``
   into a new table (after a warm-up): alone, then ``--peak-rounds`` times while the pool
   compacts a table of ``--peak-compact-rows`` rows (10% of its rows updated in its logs
   again before each) followed by alone again. Ratio of a round = the rate during the
   compaction over the mean of the alone runs either side; the median is reported. Every
   run starts once the runs before are flushed (no backlog carried over), and the policy
   compacts none of these tables on its own, so the pool runs only the compaction under
   test; each window's table is dropped after it (a window at peak writes gigabytes).
   Then the same 4 threads paced together at half the median alone rate, alone and
   during another compaction, flushes running: acknowledgement times p50/p99. For every
   window, the cores each process kept busy on average (CPU seconds / wall seconds): the
   table server, its flush worker, the pool's actor and this process (the clients). Every
   run on the same placement (``--service-cpus``: the pool's and the flush worker's CPUs;
   the table server gets the others; ``none``: no pinning). The ingested tables' log
   blocks are ``--log-block-format`` (Avro, the default, writes ~6x the bytes of Parquet).

Prints the three tables; writes bench/results/compaction.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.batches import percentiles_ms
from bench.common import BENCH_SCHEMA, bench_table, cpu_seconds, print_table, report
from memtier.client import wait_for_request
from memtier.compaction.compact import CompactionPolicy, compact, compaction_metadata, plan_compaction
from memtier.hudi import HudiTable
from memtier.hudi.filenames import BaseFile, classify
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.timeline import TimelineWriter, new_instant_time
from memtier.parallel import parallel_map

#: Table services settings under which the policy never compacts a table on its own.
MANUAL_COMPACTION = {"services.compaction-log-files": "1000", "services.compaction-log-fraction": "1000"}
STALENESS_SCHEMA = pa.schema([("key", pa.int64()), ("ts", pa.int64()), ("batch", pa.int64()),
                              ("name", pa.string())])


def updates(rows: int, fraction: float, log_files: int) -> list[pa.Table]:
    """``fraction`` of the keys of ``bench_table(rows)`` updated, in ``log_files`` batches."""
    updated = np.random.default_rng(3).permutation(rows)[: int(rows * fraction)]
    return [bench_table(len(keys), seed=10 + i, keys=keys, ts=2 + i)
            for i, keys in enumerate(np.array_split(updated, log_files))]


def prepare(path: Path, rows: int, buckets: int, fraction: float, log_files: int) -> HudiTable:
    """A table of base files whose latest slices' logs hold ``fraction`` of the rows as updates."""
    table = HudiTable.create(str(path), BENCH_SCHEMA, record_key="key", ordering_field="ts", buckets=buckets)
    table.write(bench_table(rows))
    for batch in updates(rows, fraction, log_files):
        table.write(batch)
    return table


def compact_all(table: HudiTable) -> int:
    """Compact every slice as a pool worker does, through the timeline; the rows written."""
    meta = table.meta
    timeline = meta.timeline()
    plan = plan_compaction(FileSystemView.build(meta.io, meta.base_path, timeline), CompactionPolicy(), force=True)
    assert plan is not None, "nothing to compact"
    instant = new_instant_time(timeline.last_timestamp())
    writer = TimelineWriter(meta.io, meta.base_path)
    inflight = writer.inflight(writer.request(instant, "compaction", plan.to_avro()))
    stats = compact(meta, instant, plan, meta.timeline())
    writer.complete(inflight, compaction_metadata(meta, stats).to_json())
    return sum(s.num_writes for s in stats)


def base_files(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if isinstance(classify(p.name), BaseFile))


def parquet_rewrite(files: list[Path], out: Path) -> int:
    """The baseline: read each file and write it again with pyarrow, the files in
    parallel as compaction does its slices; the rows."""
    out.mkdir()

    def one(f: Path) -> int:
        data = pq.read_table(f)
        pq.write_table(data, out / f.name)
        return data.num_rows

    return sum(parallel_map(one, files))


def throughput(root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    compaction, baseline = [], []
    for i in range(args.repeat):
        path = root / f"table-{i}"
        table = prepare(path, args.rows, args.buckets, args.update_fraction, args.log_files)
        files = base_files(path)
        start = time.perf_counter()
        written = parquet_rewrite(files, root / f"plain-{i}")
        baseline.append((time.perf_counter() - start, written))
        start = time.perf_counter()
        compacted = compact_all(table)
        compaction.append((time.perf_counter() - start, compacted))
        assert compacted == args.rows, (compacted, args.rows)
        assert table.read("read_optimized", columns=["key"]).num_rows == args.rows
        shutil.rmtree(path)
        shutil.rmtree(root / f"plain-{i}")
    base_s = statistics.median(s for s, _ in baseline)
    results = []
    for name, runs in (("parquet read + write (baseline)", baseline), ("compaction", compaction)):
        seconds = statistics.median(s for s, _ in runs)
        results.append({"what": name, "rows": runs[0][1], "seconds": round(seconds, 3),
                        "rows_per_s": round(runs[0][1] / seconds), "ratio": round(base_s / seconds, 2),
                        "runs_s": [round(s, 3) for s, _ in runs]})
    return results


def staleness(cluster: Any, args: argparse.Namespace) -> dict[str, Any]:
    acked: list[float] = []  # acknowledgement time of each batch
    stop = threading.Event()
    errors: list[BaseException] = []
    rows_per_batch = max(1, args.rate // 10)
    client = cluster.client()
    client.create_table("s", STALENESS_SCHEMA, record_key="key", ordering_field="ts", buckets=args.buckets)

    def write() -> None:
        batch, due = 0, time.monotonic()
        try:
            while not stop.is_set():
                keys = np.arange(batch * rows_per_batch, (batch + 1) * rows_per_batch)
                client.write("s", pa.table({
                    "key": keys, "ts": np.full(len(keys), batch), "batch": np.full(len(keys), batch),
                    "name": pa.array([f"row-{batch}"] * len(keys)),
                }, schema=STALENESS_SCHEMA))
                acked.append(time.monotonic())
                batch += 1
                due += 0.1
                stop.wait(max(0.0, due - time.monotonic()))
        except BaseException as e:  # reported below
            errors.append(e)

    writer = threading.Thread(target=write)
    start = time.monotonic()
    writer.start()
    samples, compactions = [], 0
    while time.monotonic() - start < args.staleness_seconds and not errors:
        time.sleep(1.0)
        now, known = time.monotonic(), len(acked)
        counts = client.read("s", mode="read_optimized", columns=["batch"]).column("batch")
        per_batch = np.bincount(counts.to_numpy(), minlength=known)[:known] if len(counts) else np.zeros(known)
        missing = np.flatnonzero(per_batch < rows_per_batch)
        lag = now - acked[int(missing[0])] if len(missing) else 0.0
        if now - start >= args.warmup:
            samples.append(lag)
    stop.set()
    writer.join()
    if errors:
        raise errors[0]
    compactions = sum(1 for n in os.listdir(os.path.join(cluster.path, "tables", "s", ".hoodie"))
                      if n.endswith(".commit"))
    rows = client.read("s", columns=["key"]).num_rows
    p50, p99 = (float(np.percentile(samples, q)) for q in (50, 99)) if samples else (0.0, 0.0)
    return {"rate_rows_per_s": rows_per_batch * 10, "seconds": args.staleness_seconds, "warmup_s": args.warmup,
            "samples": len(samples), "p50_s": round(p50, 2), "p99_s": round(p99, 2),
            "max_s": round(max(samples, default=0), 2),
            "compactions": compactions, "rows": rows, "sample_values_s": [round(s, 2) for s in samples]}


def _ingest(cluster: Any, table: str, seconds: float, threads: int = 4,
            rate: float | None = None, log_block_format: str = "avro") -> dict[str, Any]:
    """``threads`` clients write 10,000-row batches of fresh keys into a new ``table`` for
    ``seconds``: as fast as they are acknowledged, or together at ``rate`` rows/s on a fixed
    schedule. Rows/s acknowledged and each write's acknowledgement time."""
    first = cluster.client()
    first.create_table(table, STALENESS_SCHEMA, record_key="key", ordering_field="ts", buckets=1,
                       log_block_format=log_block_format)
    first.set_services(table, MANUAL_COMPACTION)  # only the compaction under test runs in the pool
    clients = [cluster.client() for _ in range(threads)]
    batch_rows = 10_000
    template = pa.table({"key": np.arange(batch_rows), "ts": np.zeros(batch_rows, dtype=np.int64),
                         "batch": np.zeros(batch_rows, dtype=np.int64),
                         "name": pa.array([f"row-{i}" for i in range(batch_rows)])}, schema=STALENESS_SCHEMA)
    counts = [0] * threads
    acks: list[list[float]] = [[] for _ in range(threads)]
    start = time.monotonic()
    deadline = start + seconds

    def write(slot: int) -> None:
        n = 0
        while time.monotonic() < deadline:
            index = n * threads + slot
            if rate is not None:
                time.sleep(max(0.0, start + index * batch_rows / rate - time.monotonic()))
            keys = pa.array(np.arange(batch_rows) + index * batch_rows)
            begin = time.monotonic()
            clients[slot].write(table, template.set_column(0, "key", keys))
            acks[slot].append(time.monotonic() - begin)
            n += 1
        counts[slot] = n * batch_rows

    workers = [threading.Thread(target=write, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return {"rows_per_s": sum(counts) / (time.monotonic() - start), "acks": [a for mine in acks for a in mine]}


def _settle(client: Any, timeout: float = 300.0) -> None:
    """Wait until every table's acknowledged rows are flushed, so that each run starts from
    the same state (no flush backlog left by the run before)."""
    deadline = time.monotonic() + timeout
    while any(t["unflushed_rows"] for t in client.status()["tables"].values()):
        if time.monotonic() > deadline:
            raise TimeoutError("flushes did not catch up")
        time.sleep(0.5)


def _updates(client: Any, table: str, rows: int, seed: int) -> None:
    """10% of ``table``'s keys updated in two flushes (two log files a slice)."""
    updated = np.random.default_rng(seed).permutation(rows)[: rows // 10]
    for i, keys in enumerate(np.array_split(updated, 2)):
        client.write(table, bench_table(len(keys), seed=seed + i, keys=keys, ts=seed + i))
        client.flush(table)


def _while_compacting(client: Any, table: str, run: Any) -> tuple[Any, dict[str, Any]]:
    """``run()`` once the pool has begun compacting ``table``; its result, and whether the
    compaction ran the whole time."""
    request = client.compact(table, wait=False)
    assert request is not None and request["tasks"]
    task = request["tasks"][0]
    while client.master.service_task(task["task_id"])["state"] == "queued":
        time.sleep(0.05)
    started = time.monotonic()
    result = run()
    overlap = client.master.service_task(task["task_id"])["state"] == "running"
    final = wait_for_request(client.master, request)
    return result, {"ran_whole_window": overlap, "state": final["state"],
                    "seconds_after_window_start": round(time.monotonic() - started, 1)}


class CpuMeter:
    """CPU seconds each process of the cluster (and this one, the clients) used in a window."""

    def __init__(self, cluster: Any) -> None:
        pids = cluster.pids()
        self.pids = {"table server": pids["ts-0"], "pool": pids["svc-0"], "clients": os.getpid()}
        self.cluster = cluster

    def measure(self, run: Any) -> tuple[Any, dict[str, float]]:
        pids = {**self.pids, "flush worker": self.cluster.flush_worker_pid("ts-0")}
        before = {name: cpu_seconds(pid) for name, pid in pids.items() if pid is not None}
        start = time.monotonic()
        result = run()
        wall = time.monotonic() - start
        return result, {name: round((cpu_seconds(pids[name]) - used) / wall, 2) for name, used in before.items()}


def peak(cluster: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Peak ingest alone and during a compaction, alternated for ``--peak-rounds``; then the
    same 4 threads paced at half the peak rate alone, and during another compaction:
    acknowledgement times. Each window's CPU use per process (cores busy on average)."""
    client = cluster.client()
    client.create_table("big", BENCH_SCHEMA, record_key="key", ordering_field="ts", buckets=2)
    client.set_services("big", MANUAL_COMPACTION)
    rows = args.peak_compact_rows
    for start in range(0, rows, 200_000):
        client.write("big", bench_table(min(200_000, rows - start), keys=np.arange(start, min(rows, start + 200_000))))
    client.flush("big")
    seconds, fmt = args.peak_seconds, args.log_block_format
    meter = CpuMeter(cluster)
    windows: list[dict[str, Any]] = []

    def window(when: str, round_: int, rate: float | None = None) -> dict[str, Any]:
        """One ingest window; alone, or once the pool compacts ``big`` (10% updated again)."""
        name = f"{when.replace(' ', '_')}_{round_}_{'paced' if rate else 'peak'}"
        if when == "alone":
            _settle(client)
            result, cpu = meter.measure(lambda: _ingest(cluster, name, seconds, rate=rate, log_block_format=fmt))
            compaction = None
        else:
            _updates(client, "big", rows, 20 + 10 * round_)
            _settle(client)
            (result, cpu), compaction = _while_compacting(
                client, "big", lambda: meter.measure(
                    lambda: _ingest(cluster, name, seconds, rate=rate, log_block_format=fmt)))
        windows.append({"when": when, "round": round_, "paced": rate is not None,
                        "rows_per_s": round(result["rows_per_s"]), "writes": len(result["acks"]),
                        **percentiles_ms("ack", result["acks"]), "ack_max_ms": round(max(result["acks"]) * 1000, 2),
                        "cores_busy": cpu, "compaction": compaction})
        client.drop_table(name, purge=True)  # a 10 s window at peak leaves gigabytes on disk
        return windows[-1]

    _ingest(cluster, "peak_warmup", min(2.0, seconds))  # connections, first WAL files
    client.drop_table("peak_warmup", purge=True)
    alone = [window("alone", 0)["rows_per_s"]]
    ratios = []
    for round_ in range(1, args.peak_rounds + 1):
        during = window("during compaction", round_)["rows_per_s"]
        alone.append(window("alone", round_)["rows_per_s"])
        ratios.append(during / ((alone[-2] + alone[-1]) / 2))
    rate = statistics.median(alone) / 2
    window("alone", args.peak_rounds + 1, rate)
    window("during compaction", args.peak_rounds + 1, rate)
    return {"seconds": seconds, "compact_rows": rows, "rounds": args.peak_rounds,
            "ratios": [round(r, 2) for r in ratios], "ratio": round(statistics.median(ratios), 2),
            "paced_target_rows_per_s": round(rate), "windows": windows}


def placed(cluster: Any) -> dict[str, str | None]:
    """The CPUs the table server, its flush worker and the pool's actor ran on (as
    ``memtier status`` shows them)."""
    status = cluster.client().status()
    server = status["servers"]["ts-0"]
    return {"table_server": server["cpus"], "flush_worker": server["flush_cpus"], "pool": status["pool"].get("svc-0")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--update-fraction", type=float, default=0.1)
    parser.add_argument("--log-files", type=int, default=2, help="deltacommits the updates are spread over")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--staleness-seconds", type=float, default=120.0, help="0: skip the staleness run")
    parser.add_argument("--warmup", type=float, default=20.0)
    parser.add_argument("--rate", type=int, default=20_000, help="rows/s the staleness run writes")
    parser.add_argument("--peak-seconds", type=float, default=10.0, help="0: skip the peak-ingest runs")
    parser.add_argument("--peak-compact-rows", type=int, default=4_000_000)
    parser.add_argument("--peak-rounds", type=int, default=3, help="alone / during-compaction pairs")
    parser.add_argument("--service-cpus", default="auto",
                        help="cluster.service-cpus of the cluster runs (table servers get the other CPUs)")
    parser.add_argument("--log-block-format", default="avro", choices=["avro", "parquet"],
                        help="log blocks of the tables the peak and paced windows write")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="memtier-bench-compaction-"))
    load = os.getloadavg()
    stale = peaks = placement = None
    try:
        results = throughput(root, args)
        if args.staleness_seconds > 0 or args.peak_seconds > 0:
            import memtier

            with memtier.start_local(str(root / "cluster"), table_servers=1,
                                     config={"cluster.service-cpus": args.service_cpus}) as cluster:
                stale = staleness(cluster, args) if args.staleness_seconds > 0 else None
                peaks = peak(cluster, args) if args.peak_seconds > 0 else None
                placement = placed(cluster)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    if stale is not None:
        print_table(["read-optimized staleness", "rate rows/s", "seconds", "samples", "p50 s", "p99 s",
                     "max s", "compactions"],
                    [["default policy", stale["rate_rows_per_s"], stale["seconds"], stale["samples"],
                      stale["p50_s"], stale["p99_s"], stale["max_s"], stale["compactions"]]])
        print()
    if peaks is not None:
        users = ["table server", "flush worker", "pool", "clients"]
        print_table(["4 threads", "round", "rows/s", "ack p50 ms", "ack p99 ms", "ack max ms",
                     *(f"{u} cores" for u in users), "compaction ran the whole window"],
                    [[("paced " if w["paced"] else "peak ") + w["when"], w["round"], w["rows_per_s"],
                      w["ack_p50_ms"], w["ack_p99_ms"], w["ack_max_ms"], *(w["cores_busy"].get(u, "-") for u in users),
                      w["compaction"]["ran_whole_window"] if w["compaction"] else "-"] for w in peaks["windows"]])
        print(f"\npeak during compaction / mean of the alone runs around it: {peaks['ratios']}, "
              f"median {peaks['ratio']}; paced at {peaks['paced_target_rows_per_s']:,} rows/s (half the median "
              f"alone); {peaks['seconds']:g} s windows; placement: {placement}\n")
    print(f"{args.rows:,} rows in {args.buckets} file groups, {args.update_fraction:.0%} of them updated "
          f"in {args.log_files} log files; load average before {load[0]:.2f}\n")
    report("compaction", ["what", "rows", "seconds", "rows/s", "ratio to baseline"],
           [[r["what"], r["rows"], r["seconds"], r["rows_per_s"], r["ratio"]] for r in results],
           {"rows": args.rows, "buckets": args.buckets, "update_fraction": args.update_fraction,
            "log_files": args.log_files, "repeat": args.repeat, "loadavg_before": load,
            "results": results, "staleness": stale, "peak": peaks, "placement": placement,
            "service_cpus": args.service_cpus, "log_block_format": args.log_block_format})


if __name__ == "__main__":
    main()
