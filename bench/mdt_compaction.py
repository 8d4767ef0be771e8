"""Listing a table's files through Hudi's metadata table after many memtier commits, with
and without memtier compacting the metadata table (issue 26).

Two tables of version 9 with a metadata table (``files`` partition) take the same
``--commits`` small writes (``HudiTable.write``, one metadata deltacommit each); after
each write the second is compacted as the master compacts it (every
``--max-delta-commits`` deltacommits). Then the listing a Hudi reader takes from the
metadata table (:func:`memtier.hudi.mdtcompact.read_files_partition`: the latest slice of
``files-0000-0``, base file and log files merged) is timed on both, median of
``--rounds``; also each compaction's time (what a commit arriving meanwhile waits).
Prints a table and writes bench/results/mdt_compaction.json.

    .venv/bin/python -m bench.mdt_compaction --commits 200
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from bench.common import report
from memtier.hudi import HudiTable
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.mdt import metadata_table_path
from memtier.hudi.mdtcompact import compact_files_partition, read_files_partition
from memtier.hudi.timeline import Timeline, new_instant_time
from tests.support.metadata_table import add_metadata_table

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("part", pa.string())])


def _table(path: str) -> HudiTable:
    table = HudiTable.create(path, SCHEMA, record_key="id", ordering_field="ts", partition_fields="part", buckets=2,
                             table_version=9)
    add_metadata_table(table.io, path)
    return HudiTable.open(path)


def _batch(i: int, partitions: int) -> pa.Table:
    ids = list(range(i * 4, i * 4 + 8))
    return pa.table({"id": ids, "ts": [i] * len(ids), "part": [f"p{k % partitions}" for k in ids]}, schema=SCHEMA)


def _listing_ms(table: HudiTable, rounds: int) -> tuple[float, int]:
    times, files = [], 0
    for _ in range(rounds):
        start = time.perf_counter()
        listing = read_files_partition(table.io, table.path, table.timeline())
        times.append((time.perf_counter() - start) * 1000)
        files = sum(len(names) for names in listing.values())
    return statistics.median(times), files


def _latest_logs(table: HudiTable) -> tuple[int, int]:
    """Log files in the latest slice of ``files-0000-0`` (what a reader merges), and in all."""
    mdt = metadata_table_path(table.path)
    view = FileSystemView.build(table.io, mdt, Timeline.load(table.io, mdt, 2), partition_filter=lambda p: p == "files")
    latest = view.latest_slice("files", "files-0000-0")
    every = sum(1 for p in Path(mdt, "files").iterdir() if ".log." in p.name)
    return (len(latest.log_files) if latest else 0), every


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-delta-commits", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-mdtc-") as root:
        plain, compacted = _table(f"{root}/plain"), _table(f"{root}/compacted")
        compactions = []
        for i in range(args.commits):
            plain.write(_batch(i, args.partitions))
            compacted.write(_batch(i, args.partitions))
            start = time.perf_counter()
            done = compact_files_partition(compacted.io, compacted.path, compacted.timeline(),
                                           lambda after: new_instant_time(after), args.max_delta_commits)
            if done is not None:
                compactions.append((time.perf_counter() - start) * 1000)
        without, files = _listing_ms(plain, args.rounds)
        with_, files_c = _listing_ms(compacted, args.rounds)
        assert files == files_c
        rows = []
        for name, table, ms in (("without", plain, without), ("with", compacted, with_)):
            merged, every = _latest_logs(table)
            rows.append([name, args.commits, files, round(ms, 1), merged, every])
    report("mdt_compaction",
           ["metadata-table compaction", "commits", "data files listed", "listing ms", "log files merged",
            "log files in files/"], rows,
           {"args": vars(args), "compactions": len(compactions),
            "compaction_p50_ms": round(statistics.median(compactions), 1) if compactions else None,
            "compaction_max_ms": round(max(compactions), 1) if compactions else None})
    if compactions:
        print(f"compactions {len(compactions)}: p50 {statistics.median(compactions):.1f} ms, "
              f"max {max(compactions):.1f} ms (commits wait meanwhile)")

if __name__ == "__main__":
    main()
