"""Schema changes under steady ingest: write acks before, during and after ``alter_table``.

    .venv/bin/python -m bench.schema_change [--dir DIR] [--seconds 30] [--rate 20]
        [--rows-per-batch 2000] [--alters 5] [--window 1.0]

One Ray runtime, a master and one table server, no table-service pool, default config
otherwise (every write synced; blocks sealed after 64 MB or 5 s, flushed every 2 s). One
client thread writes batches of fresh keys (4 buckets) on a fixed schedule (``--rate``
writes/s) for ``--seconds``, the producer never hearing of the changes (its batches leave
the new columns out); meanwhile another thread adds a column ``--alters`` times, evenly
spaced. Each write's ack latency falls in one of two phases by when it was sent:
``alter`` (from an alter's start to ``--window`` s after it returned: the servers seal
their open blocks and write new ones under the new schema) or ``steady`` (the rest).

Prints the phases' ack p50/p99/max, the alters' own durations, and how many commits the
table's timeline completed in the alter windows besides the alters themselves (flushes
on their usual schedule: a change forces none; nothing compacts). Writes
bench/results/schema_change.json. Nothing is asserted: the target (the alter phase's ack
p99 beside the steady one's; writes acknowledged throughout) is read off the table.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.batches import percentiles_ms
from bench.ceiling import scratch_dir
from bench.common import report
from memtier.cluster import start_local
from memtier.hudi import HudiTable
from memtier.hudi.timeline import parse_instant_time

HEADER = ["phase", "writes", "ack p50 ms", "ack p99 ms", "ack max ms", "late max ms"]
SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("p", pa.string()), ("v", pa.float64())])


def batch(index: int, rows: int) -> pa.Table:
    keys = np.arange(index * rows, (index + 1) * rows, dtype=np.int64)
    return pa.table({"id": keys, "ts": np.ones(rows, dtype=np.int64), "p": [f"p{k % 4}" for k in range(rows)],
                     "v": keys.astype(np.float64)}, schema=SCHEMA)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=None,
                        help="where everything is written (default: a temporary directory under /tmp, removed after)")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=20.0, help="writes per second")
    parser.add_argument("--rows-per-batch", type=int, default=2000)
    parser.add_argument("--alters", type=int, default=5)
    parser.add_argument("--window", type=float, default=1.0, help="seconds after an alter counted as its phase")
    args = parser.parse_args()
    batches = [batch(i, args.rows_per_batch) for i in range(int(args.seconds * args.rate) + 1)]
    load_before = os.getloadavg()
    with scratch_dir(args.dir) as root, start_local(str(root), table_servers=1,
                                                    config={"services.workers": "0"}) as cluster:
        client = cluster.client()
        client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", partition_fields="p", buckets=4)
        client.write("t", batch(len(batches), 10))  # the write path warmed
        sends: list[float] = []
        acks: list[float] = []
        late: list[float] = []
        alters: list[tuple[float, float]] = []
        begin = time.time() + 0.5

        def change() -> None:
            for i in range(args.alters):
                time.sleep(max(0.0, begin + (i + 1) * args.seconds / (args.alters + 1) - time.time()))
                started = time.time()
                client.alter_table("t", add_columns=[(f"c{i}", pa.string())])
                alters.append((started, time.time()))

        changer = threading.Thread(target=change)
        changer.start()
        writer = cluster.client()
        for i, data in enumerate(batches):
            due = begin + i / args.rate
            time.sleep(max(0.0, due - time.time()))
            sent = time.time()
            writer.write("t", data)
            sends.append(sent)
            acks.append(time.time() - sent)
            late.append(sent - due)
        changer.join()
        path = client.describe("t")["path"]
        commits = [parse_instant_time(i.timestamp).timestamp() for i in HudiTable.open(path).timeline().completed()]
    windows = [(start, end + args.window) for start, end in alters]

    def in_alter(t: float) -> bool:
        return any(start <= t <= end for start, end in windows)

    rows = []
    for phase in ("steady", "alter"):
        picked = [i for i, t in enumerate(sends) if in_alter(t) == (phase == "alter")]
        if not picked:
            continue
        ack = [acks[i] for i in picked]
        rows.append([phase, len(picked), *percentiles_ms("ack", ack).values(), round(max(ack) * 1000, 2),
                     round(max(late[i] for i in picked) * 1000, 2)])
    in_windows = sum(1 for c in commits if in_alter(c)) - len(alters)
    alter_ms = [round((end - start) * 1000, 1) for start, end in alters]
    print(f"alters: {len(alters)}, each took {alter_ms} ms; commits completed in their windows besides "
          f"the alters: {in_windows} (the run's {len(commits) - len(alters)} flushes over {args.seconds:.0f} s)")
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}\n")
    report("schema_change", HEADER, rows, {"args": {k: str(v) for k, v in vars(args).items()},
                                           "alter_ms": alter_ms, "flushes": len(commits) - len(alters),
                                           "flushes_in_alter_windows": in_windows,
                                           "loadavg_before": load_before, "loadavg_after": load_after})


if __name__ == "__main__":
    main()
