"""Lookups of keys in freshly flushed log files: a key read decodes the data blocks whose
key filters may hold the key, against decoding the key's whole log file.

    .venv/bin/python -m bench.log_lookup [--rows 1000000] [--partitions 5] [--lookups 40]

One table server in this process (no Ray), a table of ``--partitions`` partitions and one
bucket: 100,000 rows flushed into base files, then ``--rows`` new keys written and
flushed, so each partition gets one log file of ``--rows / --partitions`` rows (blocks
of 16,384 rows). Then ``--lookups`` calls of ``client.lookup(table, [k])`` for random
new keys from a fresh client (nothing decoded yet), each giving the key alone (every
partition's slice of its bucket is asked; the key filters rule out the others):

* **lookup**: the lookups' latency; each decodes the block holding its key unless an
  earlier lookup did (``blocks decoded`` counts them);
* **baseline** (same run, same files): decoding one partition's whole log file, the
  columns a lookup reads (``memtier.hudi.slicereader``'s decoder, as a lookup did before
  the per-block filters); median of 3.

Prints a table; writes bench/results/log_lookup.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.batches import percentiles_ms
from bench.ceiling import scratch_dir
from bench.common import report
from memtier import HudiTable
from memtier.config import TableServerConfig
from memtier.hudi import slicereader
from tests.support.inprocess import InProcessCluster

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("name", pa.string()), ("value", pa.float64()),
                    ("city", pa.string())])
HEADER = ["log file rows", "lookups", "blocks decoded", "lookup p50 ms", "lookup p99 ms", "whole-file decode ms",
          "decode / lookup p50"]


def _rows(ids: np.ndarray, ts: int, partitions: int) -> pa.Table:
    return pa.table({"id": ids, "ts": np.full(len(ids), ts), "name": np.char.add("user-", ids.astype(str)),
                     "value": np.ones(len(ids)), "city": np.char.add("city-", (ids % partitions).astype(str))},
                    schema=SCHEMA)


def run(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    cluster = InProcessCluster(str(root), config=TableServerConfig(
        block_max_age=timedelta(hours=1), flush_interval=timedelta(hours=1), memory_budget=16 << 30))
    cluster.add_server("ts-0")
    client = cluster.client()
    try:
        client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", partition_fields="city", buckets=1)
        for start in range(0, 100_000, 10_000):
            client.write("t", _rows(np.arange(start, start + 10_000), 1, args.partitions))
        client.flush("t")
        new = np.random.default_rng(7).permutation(np.arange(100_000, 100_000 + args.rows))
        for start in range(0, args.rows, 10_000):
            client.write("t", _rows(new[start:start + 10_000], 2, args.partitions))
        client.flush("t")
        reader = cluster.client()
        decoded = []
        real = slicereader._decoded

        def counted(*a: Any) -> Any:
            decoded.append(1)
            return real(*a)

        took = []
        with mock.patch.object(slicereader, "_decoded", counted):
            for key in np.random.default_rng(11).choice(new, args.lookups).tolist():
                start = time.perf_counter()
                found = reader.lookup("t", [key], columns=["id", "ts"])
                took.append(time.perf_counter() - start)
                assert found.num_rows == 1 and found["ts"][0].as_py() == 2, key
        table = HudiTable.open(cluster.master.describe_table("t")["path"])
        log_path = next(p for s in table.file_slices() for p in s.log_file_paths(table.meta.base_path))
        decode = []
        for _ in range(3):
            start = time.perf_counter()
            slicereader._decoded_blocks(table.meta, log_path, ["id", "ts"])
            decode.append(time.perf_counter() - start)
    finally:
        cluster.close()
    lookup = percentiles_ms("lookup", took)
    whole = statistics.median(decode) * 1000
    return {"log_rows": args.rows // args.partitions, "lookups": args.lookups, "blocks_decoded": len(decoded),
            **lookup, "decode_ms": round(whole, 1), "decode_vs_lookup": round(whole / lookup["lookup_p50_ms"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="new keys flushed into the log files")
    parser.add_argument("--partitions", type=int, default=5)
    parser.add_argument("--lookups", type=int, default=40)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    load = os.getloadavg()
    with scratch_dir(Path(args.dir) if args.dir else None) as root:
        result = run(root, args)
    keys = ["log_rows", "lookups", "blocks_decoded", "lookup_p50_ms", "lookup_p99_ms", "decode_ms", "decode_vs_lookup"]
    print(f"load average before {load[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    report("log_lookup", HEADER, [[result[k] for k in keys]],
           {"args": vars(args), "loadavg_before": load, "loadavg_after": os.getloadavg(), "result": result})


if __name__ == "__main__":
    main()
