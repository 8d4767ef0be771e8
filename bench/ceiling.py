"""Transport ceiling: the shared batches moved into a bare process that only appends and fdatasyncs.

    .venv/bin/python bench/ceiling.py [--dir DIR] [--batches 100] [--rows-per-batch 10000]
                                      [--window 8] [--rounds 3]

No memtier logic on either side. The receiver writes each batch's Arrow IPC message with
``os.write`` and ``os.fdatasync`` before it acknowledges. Two transports, each run with every
call waited for (window 1) and pipelined (up to ``--window`` unacknowledged batches), after
the disk alone (this process appending and syncing, no transport) as the floor under both:

* Ray: calls to a bare actor, the RecordBatch passed as the argument;
* Arrow Flight: one ``do_put`` stream to a bare server in another process (this file run with
  ``--serve-flight FILE``), which acknowledges each batch in the put metadata.

Setup (actor start, server start, connection, one empty warm-up batch) is outside the timing.
Ack latency of a batch runs from handing it to the transport to seeing its acknowledgement.
Prints a table; writes bench/results/ceiling.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.batches import make_batches, summarize
from bench.common import report

Token = TypeVar("Token")
ACK_BYTES = 8


class SyncedFile:
    """Appends Arrow IPC messages to one file, each made durable with fdatasync before returning.

    With ``drop_cache``, synced pages leave the page cache as the WAL's do (see the WAL
    section of bench/RESULTS.md): what a long run at a steady rate needs to be a fair floor.
    """

    def __init__(self, path: str, *, drop_cache: bool = False) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._drop_cache = drop_cache

    def append(self, batch: pa.RecordBatch) -> int:
        """Write ``batch`` as one IPC message, fdatasync, return the bytes written."""
        data = memoryview(batch.serialize())
        written = 0
        while written < len(data):
            written += os.write(self._fd, data[written:])
        os.fdatasync(self._fd)
        if self._drop_cache:
            os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return written

    def close(self) -> None:
        os.close(self._fd)


def pipeline(count: int, send: Callable[[int], Token], wait: Callable[[Token], object],
             window: int) -> tuple[float, list[float]]:
    """Send items ``0..count-1`` keeping at most ``window`` unacknowledged; acks come in order.

    Returns the wall seconds and each item's ack latency (send call to ``wait`` returning).
    """
    pending: deque[tuple[float, Token]] = deque()
    acks: list[float] = []

    def wait_oldest() -> None:
        sent, token = pending.popleft()
        wait(token)
        acks.append(time.monotonic() - sent)

    start = time.monotonic()
    for i in range(count):
        if len(pending) == window:
            wait_oldest()
        pending.append((time.monotonic(), send(i)))
    while pending:
        wait_oldest()
    return time.monotonic() - start, acks


@contextmanager
def ray_session() -> Iterator[None]:
    """A Ray runtime for the block: the caller's if one is up, else a local one shut down after."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def ray_ceiling(batches: Sequence[pa.RecordBatch], path: Path, window: int) -> dict[str, Any]:
    """Ray actor calls into a bare ``SyncedFile`` actor (needs a Ray runtime: ``ray_session``)."""
    import ray

    sink: Any = ray.remote(num_cpus=0)(SyncedFile).remote(str(path))  # a dynamic ActorHandle
    try:
        ray.get(sink.append.remote(batches[0].slice(0, 0)))  # warm-up: untimed
        seconds, acks = pipeline(len(batches), lambda i: sink.append.remote(batches[i]),
                                 ray.get, window)
        ray.get(sink.close.remote())
    finally:
        ray.kill(sink)
    return summarize(_name("ray", window), batches, seconds, acks, window=window,
                     file_mb=round(path.stat().st_size / 1e6, 2))


class FlightSink(flight.FlightServerBase):
    """A bare Flight server: ``do_put`` appends each batch to a file and acks it in put metadata."""

    def __init__(self, path: Path) -> None:
        super().__init__("grpc://127.0.0.1:0")
        self._path = path

    def do_put(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor,
               reader: flight.MetadataRecordBatchReader,
               writer: flight.FlightMetadataWriter) -> None:
        sink = SyncedFile(str(self._path))
        try:
            for chunk in reader:
                written = sink.append(chunk.data)
                writer.write(pa.py_buffer(written.to_bytes(ACK_BYTES, "little")))
        finally:
            sink.close()


@contextmanager
def flight_receiver(path: Path) -> Iterator[str]:
    """Run ``FlightSink`` writing to ``path`` in a child process; yields its location."""
    proc = subprocess.Popen([sys.executable, __file__, "--serve-flight", str(path)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        location = proc.stdout.readline().strip()
        if not location:
            raise RuntimeError(f"Flight receiver exited with {proc.wait()}")
        yield location
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def flight_ceiling(batches: Sequence[pa.RecordBatch], path: Path, window: int) -> dict[str, Any]:
    """One Flight ``do_put`` stream into a bare receiver process."""
    with flight_receiver(path) as location, flight.connect(location) as client:
        client.wait_for_available()
        descriptor = flight.FlightDescriptor.for_path(path.name)
        writer, acks = client.do_put(descriptor, batches[0].schema)
        writer.write_batch(batches[0].slice(0, 0))  # warm-up: untimed
        _read_ack(acks)
        seconds, latencies = pipeline(len(batches), lambda i: writer.write_batch(batches[i]),
                                      lambda _: _read_ack(acks), window)
        writer.close()
    return summarize(_name("flight", window), batches, seconds, latencies, window=window,
                     file_mb=round(path.stat().st_size / 1e6, 2))


def _read_ack(acks: flight.FlightMetadataReader) -> int:
    ack = acks.read()
    if ack is None:
        raise RuntimeError("Flight receiver closed the put stream before acknowledging")
    return int.from_bytes(ack.to_pybytes(), "little")


def _name(transport: str, window: int) -> str:
    return f"{transport}-waited" if window == 1 else f"{transport}-pipelined"


def disk_ceiling(batches: Sequence[pa.RecordBatch], path: Path, window: int) -> dict[str, Any]:
    """No transport: this process appends and fdatasyncs each batch itself (``window`` unused)."""
    sink = SyncedFile(str(path))
    try:
        seconds, acks = pipeline(len(batches), lambda i: sink.append(batches[i]), lambda _: None, 1)
    finally:
        sink.close()
    return summarize("disk-only", batches, seconds, acks, window=1,
                     file_mb=round(path.stat().st_size / 1e6, 2))


Ceiling = Callable[[Sequence[pa.RecordBatch], Path, int], dict[str, Any]]


def run_ceiling(batches: Sequence[pa.RecordBatch], root: Path, window: int,
                rounds: int = 3) -> list[dict[str, Any]]:
    """Disk alone, Ray and Flight waited and pipelined; each cell the median of ``rounds`` runs.

    The machine is shared and one run of 100 batches takes well under a second, so the rounds
    go round-robin over the cells (every cell sees the same spells of noise) and each cell
    keeps its median run by rows/s. Every run writes a new file under ``root``, deleted after.
    """
    cells: list[tuple[Ceiling, int]] = [(disk_ceiling, 1), (ray_ceiling, 1),
                                        (ray_ceiling, window), (flight_ceiling, 1),
                                        (flight_ceiling, window)]
    runs: list[list[dict[str, Any]]] = [[] for _ in cells]
    with ray_session():
        for r in range(rounds):
            for (ceiling, w), cell_runs in zip(cells, runs, strict=True):
                path = root / f"{ceiling.__name__}-{w}-{r}.ipc"
                cell_runs.append(ceiling(batches, path, w))
                path.unlink()
    return [median_run(cell_runs) for cell_runs in runs]


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run by rows/s, with every run's rows/s."""
    ordered = sorted(runs, key=lambda run: run["rows_per_s"])
    return {**ordered[len(ordered) // 2], "rounds_rows_per_s": [r["rows_per_s"] for r in runs]}


@contextmanager
def scratch_dir(path: Path | None) -> Iterator[Path]:
    """``path`` (created if missing, kept), or a new temporary directory in /tmp, removed after."""
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    tmp = Path(tempfile.mkdtemp(prefix="memtier-bench-", dir="/tmp"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def device_of(path: Path) -> str:
    """``major:minor`` of the device holding ``path``: equal values mean the same disk."""
    dev = os.stat(path).st_dev
    return f"{os.major(dev)}:{os.minor(dev)}"


def _serve_flight(path: Path) -> None:
    server = FlightSink(path)
    print(f"grpc://127.0.0.1:{server.port}", flush=True)
    server.serve()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the files go (default: a temporary directory under /tmp)")
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--rows-per-batch", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=8, help="in-flight batches when pipelined")
    parser.add_argument("--rounds", type=int, default=3, help="runs per cell; the median is kept")
    parser.add_argument("--serve-flight", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_flight is not None:
        _serve_flight(args.serve_flight)
        return
    batches = make_batches(args.batches, args.rows_per_batch)
    with scratch_dir(args.dir) as root:
        results = run_ceiling(batches, root, args.window, args.rounds)
    keys = ["system", "batches", "rows_per_s", "mb_per_s", "ack_p50_ms", "ack_p99_ms"]
    report("ceiling", ["system", "batches", "rows/s", "MB/s", "ack p50 ms", "ack p99 ms"],
           [[r[k] for k in keys] for r in results],
           {"window": args.window, "rounds": args.rounds, "results": results})


if __name__ == "__main__":
    main()
