"""RPC benchmark: memtier.rpc against a plain pyarrow.flight client/server pair, same run.

    .venv/bin/python bench/rpc.py [--seconds 3.0] [--slice 0.25] [--rows 10000]

Each server runs in its own process (as a table server would); the clients run here on
loopback. Measured:

* ``call``: round trip of a trivial control call (memtier ``RpcClient.call`` versus a bare
  DoAction), one thread;
* ``put``: puts of ``--rows``-row batches of the 5-column benchmark schema (~0.5 MB) from 1
  and 4 client threads sharing one client. The plain server reads the whole stream and
  answers with a 2-byte app-metadata ack (`{}`); memtier's decodes the JSON request, reads the
  stream into a Table, calls the service and sends a JSON ack.
* ``lookup``: a read answered with one row (what a lookup asks a table server), one
  thread: memtier's ``RpcClient.get`` as a DoGet and as a small get riding a kept-open put
  stream (``small=True``, how lookups call), against a bare DoGet.

RpcClient runs each call on the least busy of its 4 connections (the default); the plain
client gives each client thread its own connection (the ideal), and ``plain-1conn`` shares
one connection among all threads, to show what the pool buys.

The machine's load drifts, so within each cell memtier and plain alternate in ``--slice``
slices until each ran ``--seconds``. ``ratio`` is memtier / plain throughput (1.0 = the
ceiling). Prints a table; writes bench/results/rpc.json.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import astuple, dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_table, report
from memtier.rpc import RpcClient, RpcServer

SERVERS = ("memtier", "plain")
CONNECTIONS = 4  # RpcClient's default
PUT_THREADS = (1, 4)
#: A lookup's answer: one row.
ANSWER = pa.table({"id": [7], "ts": [1_795_690_404_923_267]})


@dataclass(frozen=True)
class Cell:
    """One measured run of one operation by one implementation."""

    impl: str
    op: str
    threads: int
    ops: int
    ops_s: float
    rows_s: float
    mb_s: float
    p50_ms: float
    p99_ms: float


class NullService:
    """The memtier service under test: acknowledges and drops everything."""

    def handle_action(self, name: str, request: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True}

    def handle_put(self, request: dict[str, Any], data: pa.Table) -> dict[str, Any]:
        return {"rows": data.num_rows}

    def handle_get(self, request: dict[str, Any]) -> pa.Table:
        return ANSWER


class PlainFlight(fl.FlightServerBase):
    """The ceiling: the same calls with no memtier logic."""

    def do_action(self, context: fl.ServerCallContext, action: fl.Action) -> list[bytes]:
        return [b"{}"]

    def do_put(
        self, context: fl.ServerCallContext, descriptor: fl.FlightDescriptor,
        reader: fl.MetadataRecordBatchReader, writer: fl.FlightMetadataWriter,
    ) -> None:
        reader.read_all()
        writer.write(pa.py_buffer(b"{}"))

    def do_get(self, context: fl.ServerCallContext, ticket: fl.Ticket) -> fl.FlightDataStream:
        return fl.RecordBatchStream(ANSWER)


def serve(impl: str, conn: Connection) -> None:
    """Child process: serve ``impl`` on a loopback port until the parent says stop."""
    if impl == "memtier":
        server = RpcServer(NullService()).start()
        conn.send(server.location)
        conn.recv()
        server.stop()
    else:
        plain = PlainFlight("grpc://127.0.0.1:0")
        conn.send(f"grpc://127.0.0.1:{plain.port}")
        conn.recv()
        plain.shutdown()


class PlainClient:
    """The ceiling's client: bare pyarrow.flight calls; client thread ``worker`` uses
    connection ``worker % connections``."""

    def __init__(self, location: str, connections: int) -> None:
        self._flights = [fl.FlightClient(location) for _ in range(connections)]
        self._descriptor = fl.FlightDescriptor.for_command(b"{}")

    def call(self, worker: int) -> None:
        list(self._flight(worker).do_action(fl.Action("ping", b"{}")))

    def put(self, worker: int, data: pa.Table) -> None:
        writer, acks = self._flight(worker).do_put(self._descriptor, data.schema)
        writer.write(data)
        writer.done_writing()
        acks.read()
        writer.close()

    def get(self, worker: int) -> None:
        self._flight(worker).do_get(fl.Ticket(b"{}")).read_all()

    def _flight(self, worker: int) -> fl.FlightClient:
        return self._flights[worker % len(self._flights)]


Op = Callable[[int], None]  # one operation by client thread number n


def run_slice(fn: Op, threads: int, seconds: float) -> tuple[list[float], float]:
    """Run ``fn`` from ``threads`` threads for ``seconds``: every latency, and the wall time."""
    latencies: list[list[float]] = [[] for _ in range(threads)]
    start_line = threading.Barrier(threads + 1)
    deadline: list[float] = []

    def loop(worker: int) -> None:
        start_line.wait()
        while (now := time.perf_counter()) < deadline[0]:
            fn(worker)
            latencies[worker].append(time.perf_counter() - now)

    workers = [threading.Thread(target=loop, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    begin = time.perf_counter()
    deadline.append(begin + seconds)
    start_line.wait()
    for w in workers:
        w.join()
    return [x for lat in latencies for x in lat], time.perf_counter() - begin


def measure_pair(
    op: str, threads: int, fns: dict[str, Op], work: tuple[int, int],
    seconds: float, slice_s: float,
) -> list[Cell]:
    """Alternate the implementations in ``slice_s`` slices for ``seconds`` each, so that
    load drifting on the machine hits both alike; one cell per implementation."""
    rows, nbytes = work
    latencies: dict[str, list[float]] = {impl: [] for impl in fns}
    wall = dict.fromkeys(fns, 0.0)
    for fn in fns.values():
        for worker in range(threads):
            fn(worker)  # warm the connections and code paths
    for _ in range(max(1, round(seconds / slice_s))):
        for impl, fn in fns.items():
            lat, took = run_slice(fn, threads, slice_s)
            latencies[impl] += lat
            wall[impl] += took
    cells = []
    for impl, lat in latencies.items():
        lat.sort()
        n, w = len(lat), wall[impl]
        cells.append(Cell(
            impl, op, threads, n, n / w, n * rows / w, n * nbytes / w / 1e6,
            lat[n // 2] * 1e3, lat[min(n - 1, int(n * 0.99))] * 1e3,
        ))
    return cells


def start_servers() -> dict[str, tuple[str, Connection, BaseProcess]]:
    """One server process per implementation: location, control pipe, process."""
    ctx = mp.get_context("spawn")
    servers = {}
    for impl in SERVERS:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=serve, args=(impl, child), daemon=True)
        proc.start()
        servers[impl] = (parent.recv(), parent, proc)
    return servers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per cell and implementation")
    parser.add_argument("--slice", type=float, default=0.25, help="alternation slice, seconds")
    parser.add_argument("--rows", type=int, default=10_000, help="rows per put")
    args = parser.parse_args()

    data = bench_table(args.rows)
    put_work = (args.rows, data.nbytes)
    servers = start_servers()
    memtier = RpcClient(servers["memtier"][0], connections=CONNECTIONS)
    plain = PlainClient(servers["plain"][0], CONNECTIONS)
    plain_1conn = PlainClient(servers["plain"][0], 1)
    plan: list[tuple[str, int, dict[str, Op], tuple[int, int]]] = [
        ("call", 1, {"memtier": lambda _: memtier.call("ping", {}), "plain": plain.call,
                     "plain-1conn": plain_1conn.call}, (0, 0)),
        *(
            ("put", threads, {"memtier": lambda _: memtier.put({"table": "bench"}, data),
                              "plain": lambda n: plain.put(n, data),
                              "plain-1conn": lambda n: plain_1conn.put(n, data)}, put_work)
            for threads in PUT_THREADS
        ),
        ("lookup", 1, {"memtier": lambda _: memtier.get({"table": "bench"}),
                       "memtier-streamed": lambda _: memtier.get({"table": "bench"}, small=True),
                       "plain": plain.get, "plain-1conn": plain_1conn.get}, (ANSWER.num_rows, ANSWER.nbytes)),
    ]
    cells: list[Cell] = []
    try:
        for op, threads, fns, work in plan:
            cells += measure_pair(op, threads, fns, work, args.seconds, args.slice)
    finally:
        memtier.close()
        for _, pipe, proc in servers.values():
            pipe.send("stop")
            proc.join(timeout=30)

    ceiling = {(c.op, c.threads): c for c in cells if c.impl == "plain"}
    header = ["impl", "op", "threads", "ops", "ops/s", "rows/s", "MB/s", "p50 ms", "p99 ms",
              "ratio"]
    table = [
        [*astuple(c), c.ops_s / ceiling[c.op, c.threads].ops_s] for c in cells
    ]
    print(f"put batch: {args.rows} rows, {data.nbytes / 1e6:.3f} MB of Arrow buffers; "
          f"{args.seconds} s per cell and implementation in {args.slice} s slices\n")
    report("rpc", header, table, {"args": vars(args), "batch_bytes": data.nbytes})


if __name__ == "__main__":
    main()
