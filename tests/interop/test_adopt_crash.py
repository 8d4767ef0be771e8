"""A crash mid-adoption: the table-service pool's actor SIGKILLed while it converts a table
Apache Hudi 1.1.1 wrote with its defaults (simple index, metadata table on, version 9)
into buckets, on a real Ray cluster. The kill lands after the conversion wrote some of its
new base files and before its ``replacecommit`` completed. Until the conversion is
requested again, the table reads as Hudi left it, in memtier, hudi-rs and Hudi on Spark.
The killed attempt is rolled back (its files deleted, a ``rollback`` on the timeline), the
next request converts the table, and Hudi on Spark and memtier read exactly the rows Hudi
wrote. Never half: no reader sees a row twice or misses one at any point."""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Iterator

import pyarrow as pa
import pytest

from memtier.errors import TableConvertingError
from memtier.hudi import HudiTable
from memtier.hudi.adopt import fits_buckets
from memtier.hudi.filenames import BaseFile, classify
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.timeline import State
from tests.support.hudi_spark import HudiSpark, writer_options
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.ray]
ray = pytest.importorskip("ray")

#: Enough rows that the conversion takes seconds on a loaded 2-core machine (its pool runs
#: under SCHED_IDLE), so the kill lands between its first new base file and its commit.
KEYS = 180_000
REGIONS = ("eu", "us", "apac")
BUCKETS = 4
SCHEMA = pa.schema([("id", pa.int64()), ("version", pa.int64()), ("region", pa.string()), ("v", pa.string())])
COLUMNS = SCHEMA.names


def batch(keys: list[int], version: int) -> pa.Table:
    return pa.table({"id": keys, "version": [version] * len(keys), "region": [REGIONS[k % 3] for k in keys],
                     "v": [f"v{k * 7 + version}" for k in keys]}, schema=SCHEMA)


def data(table: pa.Table) -> list[tuple]:
    return rows(table, COLUMNS)


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HudiSpark]:
    with HudiSpark(tmp_path_factory.mktemp("spark"), version="1.1.1") as session:
        yield session


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    import memtier

    running = memtier.start_local(str(tmp_path_factory.mktemp("memtier-adopt-crash")), table_servers=1, config={
        "services.check-interval": "200ms", "services.task-timeout": "5s",
    })
    yield running
    running.shutdown()


def clustering_files(path: str, instant: str) -> list[str]:
    """The base files the clustering ``instant`` wrote so far."""
    found = []
    for region in REGIONS:
        folder = os.path.join(path, f"region={region}")
        for name in os.listdir(folder) if os.path.isdir(folder) else ():
            parsed = classify(name)
            if isinstance(parsed, BaseFile) and parsed.instant == instant:
                found.append(os.path.join(folder, name))
    return found


def test_a_pool_actor_killed_mid_conversion_leaves_the_table_as_hudi_left_it_then_converted(
    spark: HudiSpark, cluster, tmp_path
) -> None:
    path = str(tmp_path / "adopted")
    options = writer_options("adopted", "id", "version", "region")
    spark.write(path, batch(list(range(KEYS)), 1), options)
    rng = random.Random(26)
    updated = sorted(rng.sample(range(KEYS), 2_000))
    spark.write(path, batch(updated, 2), options)  # log files in the file groups
    expected = data(spark.read(path))
    assert len(expected) == KEYS and data(HudiTable.open(path).read()) == expected

    client = cluster.client()
    described = client.register_table("t", path, buckets=BUCKETS)
    conversion = described["conversion"]
    assert conversion is not None
    wait_until(lambda: client.master.service_request(conversion["request_id"])["tasks"], "the conversion to be planned")
    instant = client.master.service_request(conversion["request_id"])["tasks"][0]["instant"]
    meta = HudiTable.open(path).meta
    wait_until(lambda: clustering_files(path, instant), "the conversion's first new base file", timeout=90)
    pid = cluster.pids()["svc-0"]
    os.kill(pid, signal.SIGKILL)
    timeline = meta.timeline()
    assert instant not in {i.timestamp for i in timeline.completed()}, "it completed before the kill: more rows"
    assert any(i.timestamp == instant and i.state is State.INFLIGHT for i in timeline.pending(None))
    assert data(client.read("t")) == expected  # as Hudi left it, its half-written files unseen
    assert data(hudi_rs_read(path)) == expected
    assert data(spark.read(path)) == expected
    with pytest.raises(TableConvertingError):
        client.write("t", batch([1], 5))

    # the killed attempt is rolled back and its request fails; asking again converts the table
    wait_until(lambda: client.master.service_request(conversion["request_id"])["state"] == "failed",
               "the killed conversion to be given up", timeout=90)
    assert cluster.pids()["svc-0"] != pid
    assert not clustering_files(path, instant)
    again = client.describe("t")["conversion"]
    assert again is not None and again["request_id"] != conversion["request_id"]
    wait_until(lambda: client.describe("t")["conversion"] is None, "the conversion to complete", timeout=120)
    table = HudiTable.open(path)
    timeline = table.timeline()
    assert fits_buckets(FileSystemView.build(table.io, path, timeline), BUCKETS)
    assert {i.action for i in timeline.completed(None)} >= {"replacecommit", "rollback"}
    assert timeline.pending(None) == ()
    assert data(client.read("t")) == expected
    assert data(spark.read(path)) == expected
    assert data(spark.read(path, "read_optimized")) == expected  # the conversion rewrote the logs too

    client.write("t", batch([0, 1, 2], 9))  # the tier writes it now
    client.flush("t")
    expected = sorted([r for r in expected if r[0] > 2] + data(batch([0, 1, 2], 9)),
                      key=lambda r: tuple(repr(v) for v in r))  # as rows() orders them
    assert data(client.read("t")) == expected
    assert data(spark.read(path)) == expected
