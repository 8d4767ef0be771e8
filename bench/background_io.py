"""WAL syncs while other files are written and deleted on the same disk: the bulk I/O a
table server's node does besides its WAL (flushed log and base files, compaction output,
expired WAL segments), written and deleted as memtier did before and as it does now.

    .venv/bin/python -m bench.background_io [--dir DIR] [--seconds 5] [--rate 200]
        [--frame-bytes 550000] [--bulk-mb-per-s 150] [--file-mb 64] [--rounds 2]

A WAL-like writer appends ``--frame-bytes`` (a 10,000-row write) and fdatasyncs it,
``--rate`` times a second on a fixed schedule, for ``--seconds``: its sync latency p50 /
p99 / max is the figure. Beside it, a bulk writer writes ``--file-mb`` files at
``--bulk-mb-per-s`` and deletes each one two files later, in one of these ways:

* ``none``: no bulk writer (the floor, same run);
* ``whole``: each file written, then fsync'd at once, deleted with ``unlink``: how block
  files, flushes and segment deletions went before ``memtier.diskpacing``;
* ``paced``: each file written through :class:`memtier.diskpacing.PacedFile` (written back
  a MiB at a time) and deleted with :func:`memtier.diskpacing.trickle_unlink`: how every
  bulk file memtier writes and deletes on local disk goes now.

Or, instead of the bulk writer, a reader reads a ``--file-mb`` file not in the page cache
in ``--frame-bytes`` ranges (as a flush reads its rows back from the WAL), pausing
``--read-pause`` seconds after each pass:

* ``readahead read``: plain reads, the kernel reading ahead (as the flush's memory-mapped
  reads of WAL segments went before);
* ``gentle read``: :meth:`memtier.io.LocalFileIO.read_ranges` (no readahead, a MiB at a
  time, the pages dropped after): how memtier reads WAL frames back now;
* ``parquet read``: a Parquet file of ``--file-mb`` read whole by pyarrow, memory-mapped
  (as a client reads base files, and table services did before);
* ``gentle parquet read``: the same through :class:`memtier.io.GentleFile`, as table
  services and flush workers read now (:func:`memtier.io.read_gently`).

Rounds alternate the modes, so each sees the same spells of noise; the median round by
p99 is kept. Prints a table; writes bench/results/background_io.json.
"""

from __future__ import annotations

import argparse
import os
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
from bench.common import report
from memtier.diskpacing import PacedFile, trickle_unlink
from memtier.io import GentleFile, open_fileio

HEADER = ["other I/O", "round", "its MB/s", "wal syncs", "sync p50 ms", "sync p99 ms", "sync max ms"]
MODES = ("none", "whole", "paced", "readahead read", "gentle read", "parquet read", "gentle parquet read")


class Bulk(threading.Thread):
    """Writes ``file_bytes`` files at ``rate`` bytes/s until stopped, deleting each one two
    files later, the ``mode`` way."""

    def __init__(self, directory: Path, mode: str, rate: float, file_bytes: int) -> None:
        super().__init__(daemon=True)
        self.directory, self.mode, self.rate, self.file_bytes = directory, mode, rate, file_bytes
        self.stop = threading.Event()
        self.written = 0

    def run(self) -> None:
        chunk = os.urandom(1 << 20)
        started = time.perf_counter()
        files: list[Path] = []
        while not self.stop.is_set():
            path = self.directory / f"bulk-{len(files)}"
            with open(path, "wb") as raw:
                out = PacedFile(raw) if self.mode == "paced" else raw
                for _ in range(self.file_bytes // len(chunk)):
                    out.write(chunk)
                    self.written += len(chunk)
                    ahead = self.written / self.rate - (time.perf_counter() - started)
                    if ahead > 0:
                        time.sleep(ahead)
                    if self.stop.is_set():
                        break
                raw.flush()
                os.fsync(raw.fileno())
            files.append(path)
            if len(files) > 2:
                self._remove(files[-3])
        for path in files[-2:]:
            self._remove(path)

    def _remove(self, path: Path) -> None:
        if self.mode == "paced":
            trickle_unlink(str(path))
        else:
            path.unlink(missing_ok=True)


class Reader(threading.Thread):
    """Reads a ``file_bytes`` file, dropped from the page cache, in ``frame_bytes``
    ranges, the ``mode`` way, pausing ``pause`` seconds after each pass, until stopped."""

    def __init__(self, directory: Path, mode: str, file_bytes: int, frame_bytes: int, pause: float) -> None:
        super().__init__(daemon=True)
        self.path = directory / "segment"
        self.mode, self.pause = mode, pause
        self.ranges = [(o, min(frame_bytes, file_bytes - o)) for o in range(0, file_bytes, frame_bytes)]
        self.stop = threading.Event()
        self.read = 0
        if mode.endswith("parquet read"):
            rows = file_bytes // 24  # three 8-byte columns
            pq.write_table(pa.table({"a": np.random.rand(rows), "b": np.arange(rows),
                                     "c": np.random.randint(0, 1 << 40, rows)}), self.path)
        else:
            with open(self.path, "wb") as f:
                for _ in range(file_bytes >> 20):
                    f.write(os.urandom(1 << 20))
        with open(self.path, "rb+") as f:
            os.fsync(f.fileno())

    def run(self) -> None:
        fileio = open_fileio(str(self.path.parent))
        while not self.stop.is_set():
            fd = os.open(self.path, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # every pass reads the disk
            if self.mode == "gentle read":
                self.read += sum(len(r) for r in fileio.read_ranges(str(self.path), self.ranges))
            elif self.mode.endswith("parquet read"):
                gentle = self.mode.startswith("gentle")
                source = pa.PythonFile(GentleFile(str(self.path))) if gentle else pa.memory_map(str(self.path))
                with source:
                    self.read += pq.ParquetFile(source).read().nbytes
            else:
                self.read += sum(len(os.pread(fd, n, o)) for o, n in self.ranges)
            os.close(fd)
            self.stop.wait(self.pause)
        self.path.unlink()


def wal_syncs(path: Path, seconds: float, rate: float, frame: bytes) -> list[float]:
    """Append ``frame`` and fdatasync it ``rate`` times a second on a fixed schedule."""
    latencies = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        start = time.perf_counter()
        for i in range(int(seconds * rate)):
            wait = start + i / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            begin = time.perf_counter()
            os.write(fd, frame)
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - begin)
    finally:
        os.close(fd)
        path.unlink()
    return latencies


def one(directory: Path, mode: str, round_: int, args: argparse.Namespace) -> dict[str, Any]:
    other: Bulk | Reader | None = None
    if mode.endswith("read"):
        other = Reader(directory, mode, args.file_mb << 20, args.frame_bytes, args.read_pause)
    elif mode != "none":
        other = Bulk(directory, mode, args.bulk_mb_per_s * 1e6, args.file_mb << 20)
    if other is not None:
        other.start()
        time.sleep(0.5)  # the other I/O under way first
    began = time.perf_counter()
    latencies = wal_syncs(directory / "wal", args.seconds, args.rate, os.urandom(args.frame_bytes))
    elapsed = time.perf_counter() - began
    moved = 0
    if other is not None:
        other.stop.set()
        other.join()
        moved = other.read if isinstance(other, Reader) else other.written
    p = percentiles_ms("sync", latencies)
    return {"mode": mode, "round": round_, "bulk_mb_per_s": round(moved / 1e6 / (elapsed + 0.5), 1),
            "syncs": len(latencies), "p50_ms": p["sync_p50_ms"], "p99_ms": p["sync_p99_ms"],
            "max_ms": round(max(latencies) * 1000, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=None, help="a directory on the disk to measure")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=200.0, help="WAL syncs a second")
    parser.add_argument("--frame-bytes", type=int, default=550_000)
    parser.add_argument("--bulk-mb-per-s", type=float, default=150.0)
    parser.add_argument("--file-mb", type=int, default=64)
    parser.add_argument("--read-pause", type=float, default=0.5,
                        help="seconds a reader waits after each pass over its file")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="memtier-bgio-") as scratch:
        runs = [one(Path(scratch), mode, r, args) for r in range(args.rounds) for mode in MODES]
    kept = []
    for mode in MODES:
        mine = sorted((r for r in runs if r["mode"] == mode), key=lambda r: r["p99_ms"])
        kept.append(mine[len(mine) // 2])
    rows = [[r["mode"], r["round"], r["bulk_mb_per_s"], r["syncs"], r["p50_ms"], r["p99_ms"], r["max_ms"]]
            for r in kept]
    p99 = {r["mode"]: r["p99_ms"] for r in kept}
    report("background_io", HEADER, rows, {
        "args": vars(args) | {"dir": str(args.dir)}, "runs": runs,
        "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
        "p99_vs_floor": {m: round(p99[m] / p99["none"], 2) for m in MODES if p99["none"]},
        "median_p99_ms": statistics.median(r["p99_ms"] for r in kept),
    })


if __name__ == "__main__":
    main()
