"""How far behind the writes Trino's (and Presto's) view of a memtier table is under the
default table-service policy, against memtier's own reads in the same run.

    .venv/bin/python -m bench.trino_staleness --seconds 120 [--presto]

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

With ``--presto``, the master syncs a real Hive Metastore (3.1.3, tests/support/hms.py)
instead, Trino's catalog reads that, and a real Presto 0.287 (scripts/jvm/fetch_presto.sh)
probes too, through its Hudi connector: ``t_rt`` (Presto merges log files, so its lag is
the flush) and ``t_ro`` (base files, as Trino).
"""

from __future__ import annotations

import argparse
import contextlib
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
from memtier.catalog import presto_catalog_properties, trino_catalog_properties
from memtier.hudi import HudiTable
from tests.support.hms import run_hms
from tests.support.presto import run_presto
from tests.support.trino import run_trino

TRINO = "Trino (read-optimized: base files)"
PRESTO_RT = "Presto t_rt (snapshot: base and log files)"
PRESTO_RO = "Presto t_ro (read-optimized: base files)"
MEMTIER = "memtier client.read"


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
    parser.add_argument("--presto", action="store_true", help="a Hive Metastore, and Presto probing too")
    args = parser.parse_args()

    from memtier.cluster import start_local

    root = Path(tempfile.mkdtemp(prefix="memtier-bench-staleness-"))
    lags: dict[str, list[float]] = {TRINO: [], **({PRESTO_RT: [], PRESTO_RO: []} if args.presto else {}), MEMTIER: []}
    try:
        with contextlib.ExitStack() as running:
            if args.presto:
                hms = running.enter_context(run_hms("3.1.3"))
                trino = running.enter_context(run_trino({"memtier": trino_catalog_properties(hms.uri)}))
                presto = running.enter_context(run_presto({"memtier": presto_catalog_properties(hms.uri)}))
                catalog = {"catalog.hive-metastore": hms.uri}
            else:
                trino = running.enter_context(run_trino())
                catalog = {"catalog.file-metastore": trino.metastore}
            cluster = running.enter_context(start_local(str(root / "memtier"), table_servers=1, config=catalog))

            def newest() -> dict[str, tuple[int | None, int]]:
                """The newest ``ts`` each reader sees, and when it answered (ms)."""
                queries = {TRINO: lambda: trino.query("SELECT max(ts) FROM t_ro")[0][0]}
                if args.presto:
                    queries[PRESTO_RT] = lambda: presto.query("SELECT max(ts) FROM t_rt", catalog="memtier")[0][0]
                    queries[PRESTO_RO] = lambda: presto.query("SELECT max(ts) FROM t_ro", catalog="memtier")[0][0]
                queries[MEMTIER] = lambda: pc.max(client.read("t", columns=["ts"])["ts"]).as_py()
                return {reader: (query(), _now_ms()) for reader, query in queries.items()}

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
                    seen = newest()
                    if probe - started >= args.warmup:
                        for reader, (ts, now) in seen.items():  # none of the stream seen: all of it lags
                            lags[reader].append((now - max(ts or 0, stream_start)) / 1000)
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
                "presto": args.presto, "flushes": flushes, "compactions": compactions})
        print(f"{flushes} flushes and {compactions} compactions (the default policy) during the run")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
