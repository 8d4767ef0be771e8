"""How far behind the writes Trino's view of a memtier table is under the default
table-service policy, against memtier's own reads in the same run.

    .venv/bin/python -m bench.trino_staleness --seconds 120

A local cluster (one table server and the default table-service pool; default settings
but ``catalog.file-metastore``, so the master keeps a real Trino server's metastore
current) and one table of ``--buckets`` buckets, ``--preload`` rows written and flushed
first (the size of the base files the policy weighs the logs against). A writer then
upserts ``--rows-per-batch`` rows every ``--interval`` seconds, cycling over the first
``--keys`` keys, each row's ``ts`` the wall-clock milliseconds of its write. Every ``--probe-interval`` seconds Trino runs
``SELECT max(ts)`` over the read-optimized table (base files: what its Hudi connector
reads) and memtier ``client.read`` the same: the lag of a probe is the probe's time minus
that newest ``ts`` (the stream's start while none of it shows), i.e. how old the newest
write the reader sees is. Trino's lag is the
flush, the policy's wait for enough log files and the compaction; memtier's is its read.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.common import BENCH_SCHEMA, bench_table, report
from memtier.hudi import HudiTable
from tests.support.trino import run_trino


def _now_ms() -> int:
    return int(time.time() * 1000)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _writer(client, stop: threading.Event, keys: int, rows: int, interval: float) -> None:
    start = 0
    while not stop.is_set():
        batch = bench_table(rows, seed=start, keys=(np.arange(start, start + rows) % keys).astype(np.int64))
        batch = batch.set_column(1, "ts", pa.array(np.full(rows, _now_ms(), dtype=np.int64)))
        client.write("t", batch)
        start += rows
        stop.wait(interval)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="how long to write and probe")
    parser.add_argument("--warmup", type=float, default=15.0, help="probes before this are not counted")
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--rows-per-batch", type=int, default=1_000)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between writes")
    parser.add_argument("--probe-interval", type=float, default=1.0)
    parser.add_argument("--buckets", type=int, default=2)
    parser.add_argument("--preload", type=int, default=0, help="rows written and flushed before the stream")
    args = parser.parse_args()

    from memtier.cluster import start_local

    root = Path(tempfile.mkdtemp(prefix="memtier-bench-staleness-"))
    lags: dict[str, list[float]] = {"Trino (read-optimized: base files)": [], "memtier client.read": []}
    try:
        with run_trino() as trino, start_local(
            str(root / "memtier"), table_servers=1, config={"catalog.file-metastore": trino.metastore},
        ) as cluster:
            client = cluster.client()
            client.create_table("t", BENCH_SCHEMA, record_key="key", ordering_field="ts", buckets=args.buckets)
            for start in range(0, args.preload, 200_000):
                client.write("t", bench_table(min(200_000, args.preload - start), seed=start,
                                              keys=np.arange(start, min(start + 200_000, args.preload))))
            if args.preload:
                client.flush("t")
            stop = threading.Event()
            writer = threading.Thread(target=_writer, args=(client, stop, args.keys, args.rows_per_batch,
                                                            args.interval), daemon=True)
            started, stream_start = time.monotonic(), _now_ms()
            writer.start()
            try:
                while time.monotonic() - started < args.seconds:
                    probe = time.monotonic()
                    seen = {
                        "Trino (read-optimized: base files)": trino.query("SELECT max(ts) FROM t_ro")[0][0],
                        "memtier client.read": pc.max(client.read("t", columns=["ts"])["ts"]).as_py(),
                    }
                    now = _now_ms()
                    if probe - started >= args.warmup:
                        for reader, newest in seen.items():  # none of the stream seen: all of it lags
                            lags[reader].append((now - max(newest or 0, stream_start)) / 1000)
                    time.sleep(max(0.0, args.probe_interval - (time.monotonic() - probe)))
            finally:
                stop.set()
                writer.join()
            timeline = HudiTable.open(client.describe("t")["path"]).timeline()
            compactions = len(timeline.completed(("commit",)))
            flushes = len(timeline.completed(("deltacommit",)))
        rows = [[reader, len(values), round(statistics.median(values), 2), round(_percentile(values, 0.99), 2),
                 round(max(values), 2)] for reader, values in lags.items() if values]
        report("trino_staleness", ["reader", "probes", "lag p50 s", "lag p99 s", "lag max s"], rows,
               {"seconds": args.seconds, "warmup": args.warmup, "keys": args.keys, "preload": args.preload,
                "rows_per_batch": args.rows_per_batch, "interval": args.interval, "buckets": args.buckets,
                "flushes": flushes, "compactions": compactions})
        print(f"{flushes} flushes and {compactions} compactions (the default policy) during the run")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
