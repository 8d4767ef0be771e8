"""WAL benchmark: ack latency and throughput against the raw fsync floor of the same disk.

    .venv/bin/python -m bench.wal [--dir DIR] [--seconds 1.0] [--rounds 3] [--wal KEY=VALUE]

Measures, in one run and one directory, the raw floor (``os.write + fdatasync`` of the
very bytes a WAL frame holds, dropping synced pages from the page cache as the WAL does)
and WAL appends of Arrow batches (the shared benchmark table) of about 1 KB, 64 KB and
1 MB by 1, 4 and 16 concurrent writers through one GroupCommitter: all into one block's
WAL ("shared") or each into its own ("own"). The disk is shared and its latency drifts, so
the single-writer cells alternate raw and WAL appends op by op, every throughput cell is
compared with a raw 1 MB run made just before it, and each ratio is the median over
``--rounds`` rounds. Prints a table and the target ratios; writes bench/results/wal.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass

# Before numpy loads: its BLAS thread pool is never used here and only competes for CPU.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pyarrow as pa

from bench.common import BENCH_SCHEMA, bench_table, report
from memtier.config import WalConfig, load
from memtier.io import open_fileio
from memtier.wal import GroupCommitter, WalFileName, WalHeader, WalWriter
from memtier.wal.format import RECORD_HEADER_SIZE
from memtier.wal.storage import DROP_CACHE_BYTES

SIZES = {"1KB": 1 << 10, "64KB": 64 << 10, "1MB": 1 << 20}
WRITERS = (1, 4, 16)
TARGETS = {"latency": 1.3, "64KB": 0.7, "1MB": 0.8}
MEDIAN_FIELDS = ("appends", "p50_ms", "p99_ms", "mb_s", "rows_s", "syncs_per_append")


@dataclass(frozen=True)
class Cell:
    """One measured run."""

    name: str
    appends: int
    rows_per_append: int
    bytes_per_append: int
    p50_ms: float
    p99_ms: float
    mb_s: float
    rows_s: float
    syncs_per_append: float


def make_batch(target: int) -> pa.RecordBatch:
    """Rows of the benchmark table whose WAL frame is about ``target`` bytes (55 B a row)."""
    return bench_table(max(1, round((target - 425) / 55))).combine_chunks().to_batches()[0]


def frame_bytes(batch: pa.RecordBatch) -> bytes:
    """As many bytes as a WAL frame of ``batch``, for the raw floor to write."""
    return bytes(RECORD_HEADER_SIZE) + batch.serialize().to_pybytes()


def _cell(
    name: str, latencies: list[float], elapsed: float, nbytes: int, rows: int, syncs: int
) -> Cell:
    lat = sorted(latencies)
    n = len(lat)
    return Cell(
        name,
        n,
        rows,
        nbytes,
        lat[n // 2] * 1e3,
        lat[min(n - 1, int(n * 0.99))] * 1e3,
        n * nbytes / elapsed / 1e6,
        n * rows / elapsed,
        syncs / n,
    )


class RawFile:
    """The floor: ``os.write`` + ``fdatasync`` of the same bytes on the same disk.

    It drops synced pages from the page cache exactly as the WAL does
    (``memtier.wal.storage.DROP_CACHE_BYTES``, one sync behind): a floor that kept them
    would pay page reclaim on every write once memory fills, and flatter the WAL.
    """

    def __init__(self, directory: str, data: bytes) -> None:
        self.path = os.path.join(directory, f"raw-{uuid.uuid4().hex}")
        self.data = data
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = self.synced = self.dropped = 0

    def append(self) -> float:
        t = time.perf_counter()
        os.write(self.fd, self.data)
        os.fdatasync(self.fd)
        if self.synced - self.dropped >= DROP_CACHE_BYTES:
            os.posix_fadvise(self.fd, 0, self.synced, os.POSIX_FADV_DONTNEED)
            self.dropped = self.synced
        elapsed = time.perf_counter() - t
        self.size += len(self.data)
        self.synced = self.size
        return elapsed

    def close(self) -> None:
        os.close(self.fd)
        os.unlink(self.path)


class WalSet:
    """``files`` WALs of one table server (one GroupCommitter), deleted on close."""

    def __init__(self, directory: str, files: int, config: WalConfig) -> None:
        fileio = self.fileio = open_fileio(directory)
        self.committer = GroupCommitter(config)
        block = uuid.uuid4().int >> 65
        self.wals = [
            WalWriter.create(
                fileio,
                fileio.join(directory, WalFileName(f"fg{i}", block).name),
                WalHeader("bench", "", f"fg{i}", block, BENCH_SCHEMA, 0),
                self.committer,
            )
            for i in range(files)
        ]

    def close(self) -> None:
        for wal in self.wals:
            wal.close()
            self.fileio.delete(wal.path)  # a run writes tens of GB: keep the disk free
        self.committer.close()


def bench_latency(
    directory: str, size: str, seconds: float, config: WalConfig
) -> tuple[Cell, Cell]:
    """One writer: raw and WAL appends alternate op by op, so both see the same disk."""
    batch = make_batch(SIZES[size])
    data = frame_bytes(batch)
    raw, wals = RawFile(directory, data), WalSet(directory, 1, config)
    wal, producer = wals.wals[0], uuid.uuid4().bytes
    raw_lat: list[float] = []
    wal_lat: list[float] = []
    try:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            raw_lat.append(raw.append())
            t = time.perf_counter()
            wal.append(batch, txn_id=1, producer_id=producer, producer_seq=len(wal_lat))
            wal_lat.append(time.perf_counter() - t)
        syncs = wals.committer.stats().syncs
    finally:
        raw.close()
        wals.close()
    return (
        _cell(f"raw/{size}", raw_lat, sum(raw_lat), len(data), 0, len(raw_lat)),
        _cell(f"wal/{size}/1/shared", wal_lat, sum(wal_lat), len(data), batch.num_rows, syncs),
    )


def bench_raw(directory: str, size: str, seconds: float) -> Cell:
    """Raw appends for ``seconds``: the bandwidth floor."""
    data = frame_bytes(make_batch(SIZES[size]))
    raw = RawFile(directory, data)
    latencies = []
    try:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            latencies.append(raw.append())
        elapsed = time.perf_counter() - start
    finally:
        raw.close()
    return _cell(f"raw/{size}", latencies, elapsed, len(data), 0, len(latencies))


def bench_wal(
    directory: str, size: str, writers: int, layout: str, seconds: float, config: WalConfig
) -> Cell:
    """``writers`` threads appending to one shared WAL, or each to its own."""
    batch = make_batch(SIZES[size])
    wals = WalSet(directory, 1 if layout == "shared" else writers, config)
    per_thread: list[list[float]] = [[] for _ in range(writers)]
    barrier = threading.Barrier(writers + 1)
    stop = threading.Event()

    def run(i: int) -> None:
        wal, latencies = wals.wals[i % len(wals.wals)], per_thread[i]
        producer = uuid.uuid4().bytes
        barrier.wait()
        while not stop.is_set():
            t = time.perf_counter()
            wal.append(batch, txn_id=1, producer_id=producer, producer_seq=len(latencies))
            latencies.append(time.perf_counter() - t)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(writers)]
    try:
        for t in threads:
            t.start()
        barrier.wait()
        start = time.perf_counter()
        stop.wait(seconds)
        stop.set()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
        syncs = wals.committer.stats().syncs
    finally:
        wals.close()
    latencies = [x for lat in per_thread for x in lat]
    name = f"wal/{size}/{writers}/{layout}"
    return _cell(name, latencies, elapsed, len(frame_bytes(batch)), batch.num_rows, syncs)


def run_round(
    directory: str, seconds: float, config: WalConfig
) -> tuple[list[Cell], dict[str, float]]:
    """Every cell once; ratios against the floor measured right before each WAL cell."""
    cells: list[Cell] = []
    ratios: dict[str, float] = {}
    for size in SIZES:
        raw, wal = bench_latency(directory, size, seconds, config)
        cells += [raw, wal]
        ratios[f"p50 1 writer {size} / raw {size} (<= {TARGETS['latency']})"] = (
            wal.p50_ms / raw.p50_ms
        )
        floor = bench_raw(directory, "1MB", seconds / 2)
        cells.append(dataclasses.replace(floor, name=f"raw/1MB before wal/{size}"))
        for writers in WRITERS[1:]:
            for layout in ("shared", "own"):
                cell = bench_wal(directory, size, writers, layout, seconds, config)
                cells.append(cell)
                if size != "1KB":
                    target = f"(>= {TARGETS[size]})"
                    ratios[f"MB/s {writers} writers {size} {layout} / raw 1MB {target}"] = (
                        cell.mb_s / floor.mb_s
                    )
        if size == "1MB":
            ratios[f"MB/s 1 writer 1MB / raw 1MB (>= {TARGETS['1MB']})"] = wal.mb_s / raw.mb_s
    return cells, ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", help="directory on the disk to measure (default: a temp dir)")
    parser.add_argument("--seconds", type=float, default=1.0, help="duration of one cell")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians reported)")
    parser.add_argument(
        "--wal",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a WAL config option, e.g. --wal wal.sync-policy=group-window (default: WalConfig())",
    )
    args = parser.parse_args()
    config = load(WalConfig, dict(option.split("=", 1) for option in args.wal), environ={})
    directory = tempfile.mkdtemp(prefix="memtier-bench-wal-", dir=args.dir)
    load_before = os.getloadavg()[0]
    rounds = []
    try:
        for _ in range(args.rounds):
            rounds.append(run_round(directory, args.seconds, config))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    load_after = os.getloadavg()[0]

    by_name: dict[str, list[Cell]] = {}
    for cells, _ in rounds:
        for cell in cells:
            by_name.setdefault(cell.name, []).append(cell)
    rows = []
    for name, found in by_name.items():
        med = {f: statistics.median(getattr(c, f) for c in found) for f in MEDIAN_FIELDS}
        rows.append(
            [
                name,
                int(med["appends"]),
                found[0].bytes_per_append,
                med["p50_ms"],
                med["p99_ms"],
                med["mb_s"],
                med["rows_s"] / 1e6,
                med["syncs_per_append"],
            ]
        )
    summary = {name: statistics.median(r[name] for _, r in rounds) for name in rounds[0][1]}
    print(f"{config}\n1-minute load average {load_before:.1f} before, {load_after:.1f} after\n")
    header = [
        "cell (median of rounds)",
        "appends",
        "bytes",
        "p50 ms",
        "p99 ms",
        "MB/s",
        "Mrows/s",
        "syncs/append",
    ]
    report(
        "wal",
        header,
        rows,
        {
            "seconds": args.seconds,
            "config": {k: str(v) for k, v in asdict(config).items()},
            "load_average": [load_before, load_after],
            "ratios": summary,
            "rounds": [{"cells": [asdict(c) for c in cells], "ratios": r} for cells, r in rounds],
        },
    )
    print(f"\n{'ratio (median of per-round ratios)':<58}{'median':>7}{'min':>7}{'max':>7}")
    for name, value in summary.items():
        values = [r[name] for _, r in rounds]
        print(f"{name:<58}{value:>7.2f}{min(values):>7.2f}{max(values):>7.2f}")


if __name__ == "__main__":
    main()
