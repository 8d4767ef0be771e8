"""memtier on a real HDFS end to end: the cluster root, its tables and the WAL
(``cluster.wal-path``) on ``hdfs://``, table servers as Ray actors, and HDFS's own daemons
killed under a write stream: a table server (its WAL segment left open on HDFS), a
DataNode (the WAL's pipeline loses a replica), the NameNode (stopped, then started
again). Apache Hudi on Spark reads the tables on HDFS (hudi-rs has no HDFS storage)."""

from __future__ import annotations

import contextlib
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from memtier.io import join
from tests.integration.test_ray_cluster import RayHarness, _kill, _stream
from tests.integration.test_spark_crash import SCHEMA as STREAMED
from tests.integration.test_spark_crash import (
    _batch_in_flight,
    _deduplicated,
    _inputs,
    _kill_group,
    _start_job,
)
from tests.support.hdfs import TEST_BLOCK_SIZE, HdfsCluster, run_hdfs
from tests.support.hudi_spark import HudiSpark
from tests.support.scenario import SCHEMA, random_ops, run_scenario
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.hdfs, pytest.mark.ray, pytest.mark.spark]
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def hdfs_cluster() -> Iterator[HdfsCluster]:
    """An HDFS of this module's own: its tests kill its daemons."""
    with run_hdfs(block_size=TEST_BLOCK_SIZE) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def cluster(hdfs_cluster: HdfsCluster) -> Iterator[object]:
    import memtier

    running = memtier.start_local(
        hdfs_cluster.url("memtier"), table_servers=2, storage_options=hdfs_cluster.storage_options,
        config={"cluster.wal-path": hdfs_cluster.url("wal")},
    )
    yield running
    running.shutdown()


@pytest.fixture(scope="module")
def spark(cluster: object) -> Iterator[Any]:
    import memtier.spark
    from tests.support.spark import local_session

    session = local_session()
    memtier.spark.register(session, address=cluster.address)  # type: ignore[attr-defined]
    yield session
    session.stop()


def _table(cluster: object, prefix: str, buckets: int = 4) -> tuple[str, str]:
    client = cluster.client()  # type: ignore[attr-defined]
    table = f"{prefix}_{uuid.uuid4().hex[:6]}"
    path = join(cluster.path, "tables", table)  # type: ignore[attr-defined]
    client.create_table(table, SCHEMA, record_key="id", ordering_field="ts", partition_fields="p",
                        buckets=buckets, path=path)
    return table, path


def _settle(cluster: object, table: str, acked: list[int]) -> None:
    """Every acknowledged key there once in memtier's read, before and after a flush."""
    client = cluster.client()  # type: ignore[attr-defined]
    for _ in ("unflushed", "flushed"):
        keys = client.read(table, columns=["id"]).column("id").to_pylist()
        assert len(keys) == len(set(keys)), "a key appears twice"
        assert set(acked) <= set(keys), f"{len(set(acked) - set(keys))} acknowledged rows lost"
        client.flush(table)


def test_the_wal_and_the_tables_live_on_hdfs(cluster: object, hdfs_cluster: HdfsCluster) -> None:
    from memtier.io import open_fileio

    table, path = _table(cluster, "where")
    client = cluster.client()  # type: ignore[attr-defined]
    client.write(table, pa.table({"id": [1, 2], "ts": [1, 1], "p": ["a", "b"], "v": ["x", "y"]}, schema=SCHEMA))
    io = open_fileio(hdfs_cluster.uri, hdfs_cluster.storage_options)
    assert any(f.name.endswith(".stream") for f in io.list_files(hdfs_cluster.url("wal", table)))
    client.flush(table)
    assert io.exists(join(path, ".hoodie", "hoodie.properties"))


@pytest.mark.parametrize(("seed", "kind"), [(21, "deletes"), (22, "keyless")])
def test_random_scenarios_on_hdfs(cluster: object, hudi_spark: HudiSpark, seed: int, kind: str) -> None:
    """The scenario suite (upserts, deletes, transactions, evictions, restarts, flushes)
    with everything on HDFS; Apache Hudi on Spark reads the flushed table as the model."""
    table = f"scenario_{seed}_{uuid.uuid4().hex[:6]}"
    path = join(cluster.path, "tables", table)  # type: ignore[attr-defined]
    ops = random_ops(random.Random(seed), 20, 2, deletes=kind == "deletes")
    run_scenario(RayHarness(cluster), table, path, ops, keyless=kind == "keyless", read_files=hudi_spark.read)


def _rows(ids: range, ts: int) -> pa.Table:
    return pa.table({"id": list(ids), "ts": [ts] * len(ids), "p": [f"p{i % 2}" for i in ids],
                     "v": [f"v{i}-{ts}" for i in ids]}, schema=SCHEMA)


def test_spark_reads_a_table_on_hdfs(cluster: object, spark: Any, hudi_spark: HudiSpark) -> None:
    """format("memtier"): executors read the flushed files from HDFS and the unflushed
    rows from the table servers; Apache Hudi on Spark reads the flushed table there."""
    table, path = _table(cluster, "spark")
    client = cluster.client()  # type: ignore[attr-defined]
    client.write(table, _rows(range(0, 300), 1))
    client.flush(table)
    client.write(table, _rows(range(200, 400), 2))  # in memory and the WAL only
    expected = client.read(table).sort_by("id")
    assert expected.num_rows == 400
    read = spark.read.format("memtier").option("table", table).load()
    assert pa.Table.from_pandas(read.toPandas(), schema=SCHEMA, preserve_index=False).sort_by("id").equals(expected)
    client.flush(table)
    assert sorted(hudi_spark.read(path).column("id").to_pylist()) == list(range(0, 400))


def test_compaction_clustering_and_cleaning_on_hdfs(cluster: object, hudi_spark: HudiSpark) -> None:
    """The table services rewrite and delete files on HDFS; every reader agrees after each."""
    table, path = _table(cluster, "services")
    client = cluster.client()  # type: ignore[attr-defined]
    for ts in range(1, 6):  # five flushes: a base file, then log files, in every file group
        client.write(table, _rows(range(ts * 40, ts * 40 + 200), ts))
        client.flush(table)
    expected = client.read(table).sort_by("id")
    for service in (client.compact, client.cluster, client.clean):
        task = service(table)
        assert task is None or task["state"] == "completed", task
        assert client.read(table).sort_by("id").equals(expected)
    found = hudi_spark.read(path).select(SCHEMA.names).sort_by("id")
    assert found.cast(SCHEMA).equals(expected)


def test_a_killed_spark_stream_into_a_table_on_hdfs_leaves_the_deduplicated_input(
    cluster: object, hudi_spark: HudiSpark, tmp_path
) -> None:
    """A streaming query into a memtier table on HDFS (tests/support/spark_stream_job.py),
    its driver and JVM SIGKILLed mid-batch and restarted from its checkpoint, then a table
    server SIGKILLed while a batch writes: the table is the deduplicated input, exactly."""
    client = cluster.client()  # type: ignore[attr-defined]
    table = f"stream_{uuid.uuid4().hex[:6]}"
    path = join(cluster.path, "tables", table)  # type: ignore[attr-defined]
    client.create_table(table, STREAMED, record_key="id", ordering_field="ts", partition_fields="city",
                        buckets=2, path=path)
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    batches = _inputs(source)
    job = _start_job(cluster, table, source, checkpoint, pause=1.0)
    wait_until(lambda: _batch_in_flight(checkpoint) is not None, "a micro-batch in flight", timeout=180)
    _kill_group(job)
    job = _start_job(cluster, table, source, checkpoint, pause=1.0)
    wait_until(lambda: _batch_in_flight(checkpoint) is not None, "a micro-batch in flight", timeout=180)
    _kill(cluster, "ts-1")
    out, _ = job.communicate(timeout=600)
    assert job.returncode == 0 and "done" in out, out
    expected = _deduplicated(batches)
    assert client.read(table, "committed").sort_by("id").equals(expected)
    client.flush(table)
    assert hudi_spark.read(path).select(STREAMED.names).cast(STREAMED).sort_by("id").equals(expected)


@contextlib.contextmanager
def _streaming(cluster: object, table: str) -> Iterator[Callable[[int, str], None]]:
    """A writer thread streaming fresh keys into ``table`` (``_stream``), going before the
    body runs; yields ``more(n, what)``, which waits for ``n`` more acknowledgements. At
    the end the stream stops (no write may have failed) and every acknowledged key is
    checked (:func:`_settle`)."""
    client = cluster.client()  # type: ignore[attr-defined]
    stop, acked, errors = threading.Event(), [], []
    writer = threading.Thread(target=_stream, args=(client, table, stop, acked, errors))
    writer.start()

    def more(n: int, what: str) -> None:
        count = len(acked)
        wait_until(lambda: len(acked) >= count + n or errors, what, timeout=120)

    try:
        more(2000, "the stream to get going")
        yield more
    finally:
        stop.set()
        writer.join(timeout=120)
    assert not errors, errors
    _settle(cluster, table, acked)


def test_sigkill_of_a_table_server_with_its_wal_on_hdfs(cluster: object) -> None:
    """The killed server's segment is left open on HDFS (its lease held by a dead client):
    the restarted server recovers it (its last block read up to the last hsync) and
    every acknowledged row is there once."""
    table, _ = _table(cluster, "crash_ts")
    with _streaming(cluster, table) as more:
        _kill(cluster, "ts-0")
        more(2000, "writes to go on after the restart")


def test_sigkill_of_a_datanode_mid_stream(cluster: object, hdfs_cluster: HdfsCluster) -> None:
    """One of the three DataNodes is SIGKILLed under the stream: the WAL's hsync that
    hangs on the broken pipeline is cut off, the segment reopened on the live replicas,
    and writes go on; nothing acknowledged is lost, and the DataNode's return changes
    nothing."""
    table, _ = _table(cluster, "crash_dn")
    with _streaming(cluster, table) as more:
        hdfs_cluster.kill_datanode(0)
        more(2000, "writes to go on without the DataNode")
        hdfs_cluster.start_datanode(0)
        hdfs_cluster.wait_ready(3)
        more(1000, "writes to go on with the DataNode back")


def _stream_through_outage(client: object, table: str, stop: threading.Event, acked: list[int],
                           failures: list[tuple[float, str]], acks: list[float]) -> None:
    """Like ``_stream``, but a failed write is recorded and sent again (same keys) until
    it is acknowledged, as a producer that retries does; ``acks``: when each was."""
    next_key = 0
    while not stop.is_set():
        keys = list(range(next_key, next_key + 50))
        batch = pa.table({"id": keys, "ts": [1] * 50, "p": [f"p{k % 2}" for k in keys],
                          "v": [f"v{k}" for k in keys]}, schema=SCHEMA)
        try:
            client.write(table, batch)  # type: ignore[attr-defined]
        except Exception as e:  # the NameNode is down: recorded, then retried
            failures.append((time.monotonic(), f"{type(e).__name__}: {e}"))
            time.sleep(0.5)  # a producer's retry back-off
            continue
        acked.extend(keys)
        acks.append(time.monotonic())
        next_key += 50


def test_namenode_stopped_and_restarted_mid_stream(cluster: object, hdfs_cluster: HdfsCluster) -> None:
    """The NameNode is SIGKILLed for a while under the stream: a WAL sync waits for it
    (hdfs-native retries it, then the segment is reopened once it answers), a write the
    outage outlasts fails with an error naming HDFS; nothing acknowledged is lost and
    writes resume by themselves once it is back."""
    table, _ = _table(cluster, "crash_nn")
    client = cluster.client()  # type: ignore[attr-defined]
    stop, acked, failures, acks = threading.Event(), [], [], []
    writer = threading.Thread(target=_stream_through_outage, args=(client, table, stop, acked, failures, acks))
    writer.start()
    wait_until(lambda: len(acked) >= 2000, "the stream to get going")
    hdfs_cluster.stop_namenode()
    stopped, count = time.monotonic(), len(acked)
    # down until the stream has felt it: a write failed, or none was acknowledged for 10 s
    wait_until(lambda: any(at >= stopped for at, _ in failures)
               or (len(acked) == count and time.monotonic() - stopped >= 10), "the outage to be felt")
    hdfs_cluster.start_namenode()
    hdfs_cluster.wait_ready(3)
    wait_until(lambda: len(acked) >= count + 2000, "writes to resume after the NameNode's restart", timeout=180)
    stop.set()
    writer.join(timeout=120)
    during = [f for f in failures if f[0] >= stopped]
    stall = max(b - a for a, b in zip(acks, acks[1:], strict=False) if b >= stopped)
    print(f"NameNode outage: longest wait for an ack {stall:.1f} s; {len(during)} writes failed "
          f"and were retried{': ' + during[0][1] if during else ''}")
    _settle(cluster, table, acked)
