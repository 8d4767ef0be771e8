"""``memtier demo``: the write tier end to end on this machine, in one command.

Starts an embedded cluster, streams upserts into a new table, first as fast as one writer
gets acknowledgements, then at half that rate, while a second client reads acknowledged
keys back (how soon an acknowledged row is readable, on a saturated machine and on one
with headroom), flushes, stops the cluster, and reads the Hudi table with hudi-rs, a
reader with no memtier code, to show that it holds the same rows memtier served.
"""

from __future__ import annotations

import importlib.util
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from memtier.cli_format import Console, human_seconds, render_table
from memtier.client import Client
from memtier.errors import MemtierError
from memtier.gcpauses import freeze_startup
from memtier.placement import available

if TYPE_CHECKING:
    from memtier.cluster import LocalCluster

__all__ = ["ROWS_PER_BATCH", "SCHEMA", "SECONDS", "DemoOptions", "StreamStats", "Upserts", "check_with_hudi_rs",
           "free_name", "local_cluster", "run_demo", "show_readers", "show_timeline", "table_servers_for"]

SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("ts", pa.int64()),
    ("name", pa.string()),
    ("value", pa.float64()),
    ("city", pa.string()),
])
CITIES = np.array(["amsterdam", "berlin", "lisbon", "oslo", "paris"])
BUCKETS = 4
#: The key space is this many batches wide, so most rows of a run update an earlier key.
KEY_SPACE_IN_BATCHES = 100
#: How long an acknowledged row may stay invisible before the demo calls it a failure.
VISIBILITY_TIMEOUT = 10.0
#: How long each phase streams, and rows a write, unless told otherwise.
SECONDS = 5.0
ROWS_PER_BATCH = 1000


@dataclass(frozen=True)
class DemoOptions:
    path: str
    seconds: float = SECONDS
    rows_per_batch: int = ROWS_PER_BATCH
    temporary: bool = False  # path is a fresh temp dir (said so in the output)


class Upserts:
    """Batches of upserts over a fixed key space: ids at random (so most rows update an
    earlier key), ``ts`` strictly increasing epoch microseconds (the newest write of a key
    wins), ``city`` a function of the id (a key never changes partition)."""

    def __init__(self, rows_per_batch: int, seed: int = 7) -> None:
        self.rows_per_batch = rows_per_batch
        self._rng = np.random.default_rng(seed)
        self._seen = np.zeros(rows_per_batch * KEY_SPACE_IN_BATCHES, dtype=bool)
        self._last_ts = 0

    def next(self) -> pa.Table:
        ids = self._rng.integers(0, len(self._seen), self.rows_per_batch)
        start = max(time.time_ns() // 1000, self._last_ts + 1)
        ts = np.arange(start, start + len(ids), dtype=np.int64)
        self._last_ts = int(ts[-1])
        self._seen[ids] = True
        return pa.table({
            "id": ids,
            "ts": ts,
            "name": np.char.add("user-", ids.astype(str)),
            "value": self._rng.random(len(ids)).round(4),
            "city": CITIES[ids % len(CITIES)],
        }, schema=SCHEMA)

    @property
    def distinct_keys(self) -> int:
        return int(self._seen.sum())


@dataclass(frozen=True)
class Ack:
    """The newest acknowledged row: its key and ordering value, and when the ack came."""

    number: int
    key: int
    ts: int
    at: float


class AckBoard:
    """Hands the writer's newest acknowledged row to the freshness reader."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._last: Ack | None = None

    def post(self, key: int, ts: int) -> None:
        with self._cond:
            number = self._last.number + 1 if self._last else 1
            self._last = Ack(number, key, ts, time.perf_counter())
            self._cond.notify_all()

    def next_ack(self, timeout: float) -> Ack | None:
        """The first ack posted after this call (the newest, if several came before the
        caller woke), waiting up to ``timeout`` seconds for one."""
        with self._cond:
            number = self._last.number if self._last else 0
            self._cond.wait_for(lambda: self._last is not None and self._last.number > number, timeout)
            return self._last if self._last is not None and self._last.number > number else None


@dataclass
class StreamStats:
    """What the writer and the reader measured; thread-safe. ``unit`` names what is
    acknowledged: a write, or a micro-batch of a Spark stream."""

    unit: str = "acks"
    acks: int = 0
    rows: int = 0
    ack_seconds: list[float] = field(default_factory=list)
    freshness: list[float] = field(default_factory=list)
    first_read: int = 0  # probes that saw their row on the first read
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def acked(self, rows: int, seconds: float, count: int = 1) -> None:
        """``count`` acknowledgements of ``rows`` rows in all, the last after ``seconds``."""
        with self._lock:
            self.acks += count
            self.rows += rows
            self.ack_seconds.append(seconds)

    def seen(self, freshness: float, reads: int) -> None:
        with self._lock:
            self.freshness.append(freshness)
            self.first_read += reads == 1

    def line(self, seconds: float) -> str:
        """acks/s, rows/s and freshness percentiles over the first ``seconds``."""
        with self._lock:
            acks, rows, fresh = self.acks, self.rows, list(self.freshness)
        rate = max(seconds, 1e-9)
        per_second = acks / rate
        text = (f"{seconds:4.1f} s  {per_second:,.{0 if per_second >= 10 else 1}f} {self.unit}/s  "
                f"{rows / rate:,.0f} rows/s  freshness ")
        if not fresh:
            return text + "(no read yet)"
        p50, p99 = np.percentile(fresh, [50, 99])
        return text + f"p50 {human_seconds(p50)} p99 {human_seconds(p99)}"


class _Worker(threading.Thread):
    """A thread that keeps the exception it died of, for the main thread to raise."""

    def __init__(self, name: str, target: Callable[[], None]) -> None:
        super().__init__(name=name, daemon=True)
        self._target_fn = target
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._target_fn()
        except BaseException as e:  # handed to the main thread
            self.error = e


def _write_loop(client: Client, table: str, upserts: Upserts, board: AckBoard, stats: StreamStats,
                until: float, rate: float | None, stop: threading.Event) -> None:
    """Write batches until ``until`` (at least one); with ``rate`` (rows/s), batch ``n`` goes
    out no sooner than ``n`` batches' worth of that rate after the start."""
    started = time.monotonic()
    for sent in itertools.count(1):
        batch = upserts.next()
        result = client.write(table, batch)
        stats.acked(result.rows, result.seconds)
        board.post(batch["id"][-1].as_py(), batch["ts"][-1].as_py())
        if stop.is_set() or time.monotonic() >= until:
            return
        if rate is not None:
            stop.wait(max(0.0, started + sent * upserts.rows_per_batch / rate - time.monotonic()))


def _read_loop(client: Client, table: str, board: AckBoard, stats: StreamStats, stop: threading.Event) -> None:
    """Read acknowledged rows back (``lookup``: a latest-mode read of the key's file
    group) until their acknowledged version shows; time it from the ack. The reader takes
    the first ack that comes once it is ready, so a lookup starts as its row is acknowledged
    (an ack that came while the reader was busy would have aged before its lookup began)."""
    while not stop.is_set():
        ack = board.next_ack(timeout=0.2)
        if ack is None:
            continue
        for reads in itertools.count(1):
            got = client.lookup(table, [ack.key], columns=["id", "ts"])
            now = time.perf_counter()
            if got.num_rows and max(got["ts"].to_pylist()) >= ack.ts:
                stats.seen(now - ack.at, reads)
                break
            if now - ack.at > VISIBILITY_TIMEOUT:
                raise MemtierError(f"key {ack.key} acknowledged {now - ack.at:.1f} s ago is still not readable")


def free_name(existing: list[str], base: str = "demo") -> str:
    """``base``, or ``base_2``, ``base_3``... when a table of that name exists (a re-run on
    the same ``--path``)."""
    taken = set(existing)
    return next(n for n in (base, *(f"{base}_{i}" for i in range(2, 1000))) if n not in taken)


def table_servers_for(cpus: int) -> int:
    """One table server per two cores (one for the server, one for its flush worker and
    the table services), at least one, at most two: on two cores a second server would
    share the first one's core and halve what each can take."""
    return max(1, min(2, cpus // 2))


@contextmanager
def local_cluster(options: DemoOptions, console: Console) -> Iterator[LocalCluster]:
    """A cluster on this machine for the demo's data directory, stopped at the end."""
    from memtier.cluster import start_local

    kind = "a new temporary directory" if options.temporary else "from --path"
    console.step(f"data directory: {options.path} ({kind}; kept afterwards)")
    servers = table_servers_for(len(available()))
    with console.task(f"starting Ray, a master and {servers} table server{'s' if servers > 1 else ''} (5-15 s)"):
        cluster = start_local(options.path, table_servers=servers)
    console.note(f"master at {cluster.address}")
    try:
        yield cluster
    finally:
        with console.task("stopping the cluster"):
            cluster.shutdown()


def run_demo(options: DemoOptions, console: Console) -> int:
    """Run every step; 0 when hudi-rs reads exactly the rows memtier served, else 1."""
    with local_cluster(options, console) as cluster:
        writer, reader = cluster.client(), cluster.client()
        freeze_startup()  # Ray's driver state and the imports: no full collection walks them mid-stream
        path, served = _stream_and_flush(writer, reader, options, console)
    show_timeline(path, console)
    same = check_with_hudi_rs(path, served, console)
    show_readers(path, console)
    return 0 if same else 1


def _stream_and_flush(writer: Client, reader: Client, options: DemoOptions,
                      console: Console) -> tuple[str, pa.Table]:
    table = free_name(writer.list_tables())
    created = writer.create_table(table, SCHEMA, record_key="id", ordering_field="ts",
                                  partition_fields="city", buckets=BUCKETS)
    console.step(f"created table {table!r}: id int64 (record key), ts int64 (ordering), name string, "
                 f"value double, city string (partition); {BUCKETS} buckets")
    console.note(created["path"])
    upserts = Upserts(options.rows_per_batch)
    with console.task("first write (opens the table's WAL stream)"):
        writer.write(table, upserts.next())
    console.step(f"streaming upserts at full speed for {options.seconds:g} s ({options.rows_per_batch:,} rows "
                 "a batch, one writer) while a second client looks acknowledged keys up")
    peak = _stream(writer, reader, table, upserts, options.seconds, None, console)
    half = peak.rows / options.seconds / 2
    console.step(f"streaming at half that rate ({half:,.0f} rows/s) for {options.seconds:g} s: "
                 "the first flush runs meanwhile")
    _stream(writer, reader, table, upserts, options.seconds, half, console)
    console.note(f"{upserts.distinct_keys:,} distinct keys written in all")
    with console.task("flushing the rest into the Hudi table"):
        writer.flush(table)
    served = writer.read(table, "latest")
    console.step(f"memtier read(latest) after the flush: {served.num_rows:,} rows")
    return created["path"], served


def _stream(writer: Client, reader: Client, table: str, upserts: Upserts, seconds: float,
            rate: float | None, console: Console) -> StreamStats:
    """Write for ``seconds`` (at ``rate`` rows/s, or as fast as acks come back) while the
    reader looks acknowledged keys up; show it live and summarize it."""
    stats = StreamStats()
    board = AckBoard()
    stop = threading.Event()
    started = time.monotonic()
    workers = [
        _Worker("demo-writer", lambda: _write_loop(writer, table, upserts, board, stats,
                                                    started + seconds, rate, stop)),
        _Worker("demo-reader", lambda: _read_loop(reader, table, board, stats, stop)),
    ]
    for w in workers:
        w.start()
    try:
        while workers[0].is_alive() and workers[1].is_alive():
            console.live(stats.line(time.monotonic() - started))
            workers[0].join(0.25)
    finally:
        stop.set()
        for w in workers:
            w.join()
    console.end_live(stats.line(time.monotonic() - started))
    for w in workers:
        if w.error is not None:
            raise w.error
    ack_p50, ack_p99 = np.percentile(stats.ack_seconds, [50, 99])
    console.note(f"{stats.acks:,} acknowledged writes of {stats.rows:,} rows (ack p50 {human_seconds(ack_p50)}, "
                 f"p99 {human_seconds(ack_p99)})")
    if stats.freshness:
        p50, p99 = np.percentile(stats.freshness, [50, 99])
        console.note(f"the second client had an acknowledged row {human_seconds(p50)} after its ack (p50; "
                     f"p99 {human_seconds(p99)}; {len(stats.freshness):,} probes); "
                     f"{stats.first_read / len(stats.freshness):.0%} found it on the first lookup")
    return stats


def show_timeline(path: str, console: Console) -> None:
    """The table's Hudi timeline: each completed instant, its action, files and records."""
    from memtier.hudi import HudiTable

    hudi = HudiTable.open(path)
    timeline = hudi.timeline()
    instants = timeline.completed(None)
    rows = []
    for instant in instants:
        commit = timeline.read_commit_metadata(hudi.io, path, instant)
        stats = [s for group in commit.partition_to_write_stats.values() for s in group]
        rows.append((instant.timestamp, instant.action, instant.state.value, len(commit.files()),
                     f"{sum(s.num_writes for s in stats):,}"))
    console.step(f"Hudi timeline ({path}/.hoodie): {len(instants)} completed, "
                 f"{len(timeline.pending(None))} pending")
    shown = rows[-12:]
    if len(rows) > len(shown):
        console.note(f"... {len(rows) - len(shown)} earlier instants")
    for line in render_table(("instant", "action", "state", "files", "records"), shown, right=(3, 4)):
        console.note(line)


def _read_with_hudi_rs(path: str) -> pa.Table:
    from hudi import HudiReadOptions, HudiTableBuilder

    table = HudiTableBuilder.from_base_uri(path).build()
    batches = table.read(HudiReadOptions())
    if not batches:
        return SCHEMA.empty_table()
    return pa.Table.from_batches(batches).select(SCHEMA.names).cast(SCHEMA)


def check_with_hudi_rs(path: str, served: pa.Table, console: Console) -> bool:
    """Read the Hudi table with hudi-rs and compare it with ``served``, the rows memtier
    read; whether they are the same (or hudi-rs is not installed, said so)."""
    if importlib.util.find_spec("hudi") is None:
        console.step("skipped the hudi-rs read: the hudi package is not installed (pip install hudi)")
        return True
    with console.task("reading it with hudi-rs (no memtier, no cluster)"):
        theirs = _read_with_hudi_rs(path)
    ours = served.select(SCHEMA.names).cast(SCHEMA).sort_by("id")
    theirs = theirs.sort_by("id")
    same = ours.equals(theirs)
    console.note(f"row counts: memtier {ours.num_rows:,}, hudi-rs {theirs.num_rows:,}: "
                 + ("match" if ours.num_rows == theirs.num_rows else "MISMATCH"))
    console.note("every row (id, ts, name, value, city): " + ("identical" if same else "DIFFERENT"))
    console.note("sample rows read by hudi-rs:")
    sample = theirs.slice(0, 5).to_pylist()
    for line in render_table(SCHEMA.names, [[r[n] for n in SCHEMA.names] for r in sample], right=(0, 1, 3)):
        console.note("  " + line)
    return same


def show_readers(path: str, console: Console) -> None:
    """Where the Hudi table is, and how other readers open it."""
    console.step(f"the Hudi table is at {path}")
    console.note(f'hudi-rs: HudiTableBuilder.from_base_uri("{path}").build().read(HudiReadOptions())')
    console.note(f'Spark:   spark.read.format("hudi").load("{path}")   (with the Hudi Spark bundle)')
    console.note(f"Trino:   memtier sync-catalog --path {path} --metastore DIR  (registers it, prints the"
                 " catalog file; Trino's Hudi connector reads the base files: the read-optimized view)")

