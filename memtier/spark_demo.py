"""``memtier demo --spark``: a Spark pipeline into memtier, end to end on this machine.

Starts a local cluster and a local SparkSession; a Structured Streaming query writes a
rate source into a memtier table with ``format("memtier")`` (one memtier transaction per
micro-batch) while a lookup client in the driver reads each micro-batch back as soon as
Spark reports it done (how soon an acknowledged micro-batch is readable). Then, with the
stream stopped and flushed, a backfill with ``df.write.format("memtier")`` straight into
Hudi files, a compaction, a Spark batch read, and hudi-rs reading the Hudi table with no
memtier code. Ends with a summary and the lines a Spark job needs to do the same.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memtier.cli_format import Console, human_seconds
from memtier.client import Client
from memtier.demo import (
    CITIES,
    SCHEMA,
    VISIBILITY_TIMEOUT,
    DemoOptions,
    StreamStats,
    check_with_hudi_rs,
    free_name,
    local_cluster,
    show_timeline,
)
from memtier.errors import MemtierError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["ROWS_PER_BATCH", "SECONDS", "MicroBatch", "run_spark_demo"]

#: How long the stream is measured, and the rows of each micro-batch, unless told otherwise.
SECONDS = 15.0
ROWS_PER_BATCH = 100_000
#: A micro-batch starts every TRIGGER seconds (at once, when the one before took longer).
TRIGGER = 2.0
#: The stream's key space is this many micro-batches wide: later batches update earlier keys.
KEY_SPACE_IN_BATCHES = 2
#: The backfill writes this share of the stream's key space, as new keys.
BACKFILL_SHARE = 0.5
#: How often the driver asks Spark whether a micro-batch completed.
POLL = 0.01
FIRST_BATCH_TIMEOUT = 180.0
SETTLE_TIMEOUT = 120.0
#: Errors only. Spark's own loggers get a level of their own, equal to the root's, so that
#: PySpark's shell start-up does not announce a level it would set.
_LOG4J = """\
rootLogger.level = error
logger.spark.name = org.apache.spark
logger.spark.level = error
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


@dataclass(frozen=True)
class MicroBatch:
    """A micro-batch Spark completed: the rate source's values ``[first, end)`` it wrote,
    when it was done (epoch seconds, Spark's clock: its trigger's start plus its time),
    and how long it took."""

    batch_id: int
    first: int
    end: int
    done_at: float
    seconds: float

    @property
    def rows(self) -> int:
        return self.end - self.first

    @classmethod
    def of(cls, progress: Any) -> MicroBatch | None:
        """The micro-batch a query progress reports, or None for one without rows."""
        if not progress.numInputRows:
            return None
        source = progress.sources[0]
        first, end = _offset(source.startOffset), _offset(source.endOffset)
        seconds = progress.durationMs["triggerExecution"] / 1000
        started = datetime.fromisoformat(progress.timestamp).timestamp()
        return cls(progress.batchId, first, end, started + seconds, seconds)


@dataclass(frozen=True)
class StreamRun:
    """What the lookup client measured of the stream, over how many seconds, and the rows
    the stream wrote in all."""

    stats: StreamStats
    seconds: float
    written: int


@dataclass(frozen=True)
class Backfill:
    """The rows a backfill wrote (keys from ``first_key`` on), in how many seconds."""

    first_key: int
    rows: int
    seconds: float


@dataclass(frozen=True)
class PipelineRun:
    """What the Spark pipeline did: the stream (and how many of its rows were not yet
    flushed when it stopped), the backfill (and the base and log files after it), and the
    table as memtier and Spark read it."""

    stream: StreamRun
    unflushed: int
    backfill: Backfill
    files_before_compaction: tuple[int, int]
    served: pa.Table
    spark_rows: int


def _offset(offset: Any) -> int:
    """The row count in a ``rate-micro-batch`` offset (``{"offset": n, ...}``; none: 0)."""
    if isinstance(offset, str):
        offset = json.loads(offset) if offset.startswith("{") else None
    return int(offset["offset"]) if offset else 0


def run_spark_demo(options: DemoOptions, console: Console) -> int:
    """Run every step; 0 when hudi-rs and Spark read exactly the rows memtier served, else 1."""
    workdir = Path(options.path) / "spark"
    with local_cluster(options, console) as cluster:
        client = cluster.client()
        table = free_name(client.list_tables())
        path = client.create_table(table, SCHEMA, record_key="id", ordering_field="ts",
                                   partition_fields="city", buckets=4)["path"]
        console.step(f"created table {table!r} (id record key, ts ordering, city partition; 4 buckets) at {path}")
        with console.task("starting Spark: local[2], one JVM (5-15 s)"):
            spark = _session(workdir)
        try:
            run = _pipeline(spark, client, table, path, options, workdir, console)
        finally:
            with console.task("stopping Spark"):
                spark.stop()
    show_timeline(path, console)
    same = check_with_hudi_rs(path, run.served, console)
    _summary(run, path, same, table, console)
    return 0 if same and _complete(run) and run.spark_rows == run.served.num_rows else 1


def _pipeline(spark: SparkSession, client: Client, table: str, path: str, options: DemoOptions, workdir: Path,
              console: Console) -> PipelineRun:
    import memtier.spark

    memtier.spark.register(spark)  # format("memtier"), on the cluster this process started
    key_space = options.rows_per_batch * KEY_SPACE_IN_BATCHES
    stream = _stream(spark, client, table, options, key_space, workdir / "checkpoint", console)
    unflushed = client.status()["tables"][table]["unflushed_rows"]
    with console.task("flushing the rest of the stream into the Hudi table"):
        client.flush(table)
    backfill = _backfill(spark, table, key_space, max(1, int(key_space * BACKFILL_SHARE)), console)
    files = _files(path)
    console.note(f"the table's latest file slices: {files[0]} base files, {files[1]} log files")
    with console.task("compacting: log files into new base files (the table-service pool)"):
        planned = client.compact(table)
        _wait_settled(path)  # and any compaction the policy planned before the backfill
    if planned is None:
        console.note("(the table services' policy had planned it on its own)")
    served = client.read(table)
    with console.task('reading it back with spark.read.format("memtier")'):
        spark_rows = spark.read.format("memtier").option("table", table).load().count()
    console.note(f"{spark_rows:,} rows (memtier's own read: {served.num_rows:,})")
    return PipelineRun(stream, unflushed, backfill, files, served, spark_rows)


def _session(workdir: Path) -> SparkSession:
    """A local SparkSession on loopback whose Python workers run this interpreter (where
    memtier is installed), logging errors only."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:
        raise MemtierError("memtier demo --spark needs PySpark: pip install 'memtier[spark]' "
                           "(scripts/demo.sh --spark sets it up)") from e
    workdir.mkdir(parents=True, exist_ok=True)
    log4j = workdir / "log4j2.properties"
    log4j.write_text(_LOG4J)
    # The JVM starts the Python processes of format("memtier") (planning, commits) with this
    # variable's interpreter; Spark's own configuration reaches only its executors' workers.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master("local[2]").appName("memtier-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
    )
    try:
        session = builder.getOrCreate()
    except Exception as e:  # no Java, most often: Spark says so in its own words
        raise MemtierError(f"could not start Spark ({e}); it needs Java 17 or newer on PATH "
                           "(scripts/demo.sh --spark installs it)") from e
    session.sparkContext.setLogLevel("ERROR")
    return session


def _as_demo_rows(values: DataFrame, key_space: int | None) -> DataFrame:
    """Rows of the demo's schema from a column ``value`` of longs: ``id`` the value (modulo
    ``key_space``, so later values update earlier keys), ``ts`` the value (a key's newest
    write wins), ``city`` a function of the id (a key never changes partition)."""
    from pyspark.sql import functions as F

    value = F.col("value")
    key = value % key_space if key_space else value
    return values.select(
        key.alias("id"),
        value.alias("ts"),
        F.concat(F.lit("user-"), key.cast("string")).alias("name"),
        ((value * 7919 % 10_000) / 10_000.0).alias("value"),
        F.element_at(F.array(*(F.lit(str(c)) for c in CITIES)), (key % len(CITIES) + 1).cast("int")).alias("city"),
    )


def _stream(spark: SparkSession, client: Client, table: str, options: DemoOptions, key_space: int,
            checkpoint: Path, console: Console) -> StreamRun:
    """Run the streaming query for ``options.seconds`` after its first micro-batch, reading
    each micro-batch back as Spark completes it; stop it between micro-batches."""
    source = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", options.rows_per_batch)
              .option("numPartitions", 2).load())
    writer = (_as_demo_rows(source, key_space).writeStream.format("memtier").option("table", table)
              .option("checkpointLocation", str(checkpoint)).trigger(processingTime=f"{TRIGGER:g} seconds"))
    console.step(f'streaming: readStream.format("rate-micro-batch") -> writeStream.format("memtier"), '
                 f"{options.rows_per_batch:,} rows a micro-batch every {TRIGGER:g} s")
    with console.task("starting the query (Spark plans format(\"memtier\") in a Python process of its own)"):
        query = writer.start()
    try:
        with console.task("the first micro-batch (Spark starts its Python workers)"):
            first = _first_batch(query, time.monotonic() + FIRST_BATCH_TIMEOUT)
        console.note(f"then, for {options.seconds:g} s, a lookup client reads each micro-batch back once Spark "
                      "reports it done")
        stats, seconds = _follow(query, client, table, first, key_space, options.seconds, console)
    finally:
        _stop_between_batches(query)
    written = _written(query)
    batch_p50 = np.percentile(stats.ack_seconds, 50) if stats.ack_seconds else float("nan")
    console.note(f"{stats.acks:,} micro-batches of {stats.rows:,} rows (Spark took {human_seconds(batch_p50)} "
                 "a micro-batch, p50)")
    if stats.freshness:
        p50, p99 = np.percentile(stats.freshness, [50, 99])
        console.note(f"the lookup client had each micro-batch's rows {human_seconds(p50)} after Spark completed "
                     f"it (p50; p99 {human_seconds(p99)}); {stats.first_read / len(stats.freshness):.0%} "
                     "found them on the first lookup")
    return StreamRun(stats, seconds, written)


def _first_batch(query: StreamingQuery, deadline: float) -> Any:
    """Wait for the first micro-batch to complete; its progress."""
    while time.monotonic() < deadline:
        progress = query.lastProgress
        if progress is not None:
            return progress
        _check_active(query)
        time.sleep(POLL)
    raise MemtierError(f"no micro-batch completed in {FIRST_BATCH_TIMEOUT:.0f} s")


def _follow(query: StreamingQuery, client: Client, table: str, first: Any, key_space: int, seconds: float,
            console: Console) -> tuple[StreamStats, float]:
    """Until ``seconds`` have passed since the ``first`` micro-batch (its progress): as
    each micro-batch completes, look its rows up; what was measured, over how many seconds."""
    stats = StreamStats(unit="micro-batches")
    started = time.monotonic()
    shown = 0.0
    seen, written = first.batchId, _offset(first.sources[0].endOffset)
    while (elapsed := time.monotonic() - started) < seconds:
        progress = query.lastProgress
        if progress is not None and progress.batchId > seen:
            batch = MicroBatch.of(progress)
            if batch is not None:  # (and the ones that completed while a lookup ran, unread)
                stats.acked(batch.end - written, batch.seconds, count=progress.batchId - seen)
                stats.seen(*_read_back(client, table, batch, key_space))
                written = batch.end
            seen = progress.batchId
        if elapsed - shown >= 0.25:
            shown = elapsed
            _check_active(query)
            console.live(stats.line(elapsed))
        time.sleep(POLL)
    elapsed = time.monotonic() - started
    console.end_live(stats.line(elapsed))
    return stats, elapsed


def _read_back(client: Client, table: str, batch: MicroBatch, key_space: int) -> tuple[float, int]:
    """Look the micro-batch's first and last rows up (one per Spark task) until both
    show; seconds from Spark's completion of the batch to having them in hand, and the
    lookups it took."""
    wanted = {batch.first % key_space: batch.first, (batch.end - 1) % key_space: batch.end - 1}
    for reads in itertools.count(1):
        got = client.lookup(table, list(wanted), columns=["id", "ts"])
        now = time.time()
        newest = dict(zip(got["id"].to_pylist(), got["ts"].to_pylist(), strict=True))
        if all(newest.get(key, -1) >= ts for key, ts in wanted.items()):
            return max(0.0, now - batch.done_at), reads  # Spark's clock counts whole ms
        if now - batch.done_at > VISIBILITY_TIMEOUT:
            raise MemtierError(f"micro-batch {batch.batch_id}, done {now - batch.done_at:.1f} s ago, "
                               "is still not readable")
    raise AssertionError("unreachable")


def _written(query: StreamingQuery) -> int:
    """The rows the query has written: the rate source's offset after its latest micro-batch."""
    progress = query.lastProgress
    return _offset(progress.sources[0].endOffset) if progress is not None else 0


def _check_active(query: StreamingQuery) -> None:
    if not query.isActive:
        raise MemtierError(f"the streaming query stopped: {query.exception()}")


def _stop_between_batches(query: StreamingQuery, timeout: float = 30.0) -> None:
    """Stop the query while it waits for its next trigger, not inside a micro-batch
    (which Spark would abort, rolling its memtier transaction back)."""
    deadline = time.monotonic() + timeout
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.005)
    query.stop()


def _backfill(spark: SparkSession, table: str, first_key: int, rows: int, console: Console) -> Backfill:
    """Write ``rows`` rows of keys from ``first_key`` on (keys the stream never wrote) with
    a batch write, which goes straight into Hudi log files (one deltacommit), not through
    memory."""
    console.step(f'backfill: df.write.format("memtier") of {rows:,} older rows (keys the stream never wrote), '
                 "straight into Hudi files, with the stream stopped")
    history = _as_demo_rows(spark.range(first_key, first_key + rows, numPartitions=2)
                            .withColumnRenamed("id", "value"), None)
    started = time.monotonic()
    with console.task("writing it"):
        history.write.format("memtier").option("table", table).mode("append").save()
    return Backfill(first_key, rows, time.monotonic() - started)


def _wait_settled(path: str) -> None:
    """Wait until the table's timeline has no pending instant (a compaction the policy
    planned by itself, say), so that a reader of the files alone sees every row."""
    from memtier.hudi import HudiTable

    deadline = time.monotonic() + SETTLE_TIMEOUT
    while HudiTable.open(path).timeline().pending(None):
        if time.monotonic() > deadline:
            raise MemtierError(f"the table at {path} still has pending instants after {SETTLE_TIMEOUT:.0f} s")
        time.sleep(0.2)


def _files(path: str) -> tuple[int, int]:
    """Base files and log files in the table's latest file slices."""
    from memtier.hudi import HudiTable

    slices = HudiTable.open(path).file_slices()
    return sum(s.base_file is not None for s in slices), sum(len(s.log_files) for s in slices)


def _keys(run: PipelineRun) -> tuple[int, int]:
    """Keys the table holds from the stream, and from the backfill."""
    backfilled = int(pc.sum(pc.greater_equal(run.served["id"], run.backfill.first_key)).as_py() or 0)
    return run.served.num_rows - backfilled, backfilled


def _complete(run: PipelineRun) -> bool:
    """Whether the table holds every key written, once: each the backfill wrote, and each
    the stream wrote (at least those of the micro-batches Spark reported)."""
    streamed, backfilled = _keys(run)
    once = pc.count_distinct(run.served["id"]).as_py() == run.served.num_rows
    return once and backfilled == run.backfill.rows and streamed >= min(run.stream.written, run.backfill.first_key)


def _summary(run: PipelineRun, path: str, same: bool, table: str, console: Console) -> None:
    console.step("summary")
    stream, stats, backfill = run.stream, run.stream.stats, run.backfill
    if stats.freshness:
        p50, p99 = np.percentile(stats.freshness, [50, 99])
        console.note(f"stream    {stats.rows / stream.seconds:,.0f} rows/s through {stats.acks} micro-batches; each "
                     f"readable {human_seconds(p50)} after Spark completed it (p50; p99 {human_seconds(p99)})")
    console.note(f"          {stream.written:,} rows written; when it stopped, {run.unflushed:,} were in table-server "
                 "memory and WAL only, the rest in Hudi log files")
    console.note(f"backfill  {backfill.rows:,} rows in {human_seconds(backfill.seconds)}, straight into Hudi log files")
    streamed, backfilled = _keys(run)
    base, logs = _files(path)
    console.note(f"table     {run.served.num_rows:,} rows: {streamed:,} keys from the stream, {backfilled:,} from the "
                 "backfill, " + ("each once" if _complete(run) else "NOT every key written, once"))
    before_base, before_logs = run.files_before_compaction
    console.note(f"          in Hudi files: {before_base} base and {before_logs} log files before the compaction, "
                 f"{base} and {logs} after; Spark read {run.spark_rows:,} rows, hudi-rs "
                 + ("the same rows" if same else "OTHER rows"))
    console.step("in a Spark job of your own, with `memtier start` running and MEMTIER_CLUSTER_ADDRESS exported:")
    console.note("import memtier.spark; memtier.spark.register(spark)")
    console.note(f'df.writeStream.format("memtier").option("table", "{table}")'
                 '.option("checkpointLocation", "/some/dir").start()')
