"""Apache Hudi on Spark and the tier write the same file groups at once.

Hudi writes with optimistic concurrency control as its multi-writer setups do
(``FileSystemBasedLockProvider``, lazy cleaning of failed writes): a bucket-index
merge-on-read table Hudi created (table version 8 with Hudi 1.0.2, 9 with 1.1.1 and 1.2.0) is served
by the tier, which streams writes and flushes into every file group while Hudi upserts:

* a Hudi commit during which the tier's flushes completed into its file groups fails
  (Hudi raises its write conflict) and none of its rows is read;
* a flush during which a Hudi commit completed into its file groups is refused and
  rolled back by the master, and the next flush writes its rows; Hudi's commit meanwhile
  (its lazy cleaning of failed writes included) leaves the pending flush alone;
* at the end Hudi, memtier and hudi-rs read the latest version of every key, every
  acknowledged write of the tier and every successful Hudi commit, and every rollback
  on the timeline is the master's own.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from memtier import failpoints
from memtier.errors import CommitFailedError
from memtier.hudi import HudiTable
from memtier.hudi.commit import read_single_record
from memtier.hudi.timeline import State
from tests.support.hudi_spark import KEEP_LOGS, HudiSpark, HudiSparkError, writer_options
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.inprocess import InProcessCluster
from tests.support.model import TableModel, project

pytestmark = [pytest.mark.slow, pytest.mark.spark]

KEYS = 2000
BUCKETS = 2
SCHEMA = pa.schema([("id", pa.int64()), ("version", pa.int64()), ("region", pa.string()), ("v", pa.string())])
COLUMNS = SCHEMA.names
#: Hudi's multi-writer setup: optimistic concurrency, the file-system lock, lazy rollback
#: of failed writes (its metadata table off: the tier's handling of it is tested apart);
#: its archival kept off the test's instants (the test reads the rollbacks on the active
#: timeline: Hudi 1.0.2 once archived the master's rollback of a refused flush).
OCC = {
    "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
    "hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider",
    "hoodie.cleaner.policy.failed.writes": "LAZY",
    "hoodie.metadata.enable": "false",
    "hoodie.keep.min.commits": "500",
    "hoodie.keep.max.commits": "510",
    **KEEP_LOGS,
}


def batch(rng: random.Random, keys: list[int], version: int) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": k, "version": version, "region": ("eu", "us")[k % 2], "v": f"v{rng.randrange(10**6)}"} for k in keys],
        schema=SCHEMA,
    )


def data(table: pa.Table) -> list[tuple]:
    return rows(table, COLUMNS)


@pytest.fixture(scope="module", params=["1.0.2", "1.1.1", "1.2.0"])
def spark(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HudiSpark]:
    with HudiSpark(tmp_path_factory.mktemp("spark"), version=request.param) as session:
        yield session


def hudi_writing(path: str) -> str | None:
    """Hudi's inflight deltacommit, if there is one (the tier's flushes run in this thread only)."""
    found = [i.timestamp for i in HudiTable.open(path).timeline().pending(("deltacommit",))
             if i.state is State.INFLIGHT]
    return found[0] if found else None


def refused_instant(error: BaseException) -> str:
    """The flush a :class:`CommitFailedError` says the master refused."""
    found = re.search(r"deltacommit (\d{17}) of t conflicts", str(error))
    assert found is not None, error
    return found[1]


def rolled_back(path: str) -> set[str]:
    """The instants the table's rollbacks target."""
    table = HudiTable.open(path)
    timeline = table.timeline()
    targets = set()
    for rollback in timeline.pending(("rollback",)) + timeline.completed(("rollback",)):
        requested = rollback.with_state(State.REQUESTED)
        _, plan = read_single_record(table.io.read_bytes(timeline.instant_path(path, requested)))
        targets.add(plan["instantToRollback"]["commitTime"])
    return targets


def test_hudi_and_the_tier_write_the_same_file_groups(spark: HudiSpark, tmp_path) -> None:
    path = str(tmp_path / "shared")
    rng = random.Random(26)
    model = TableModel(("id",), "version", ("region",), buckets=BUCKETS)
    options = writer_options("shared", "id", "version", "region", buckets=BUCKETS, **OCC)
    first = batch(rng, list(range(KEYS)), 1)
    spark.write(path, first, options)
    model.upsert(1, first.to_pylist())
    HudiTable.open(path).set_bucket_index(BUCKETS)

    cluster = InProcessCluster(str(tmp_path / "cluster"))
    try:
        cluster.add_server("ts-0")
        client = cluster.client()
        client.register_table("t", path)

        # Hudi loses: the tier's flushes complete into its file groups while it writes (if
        # Hudi completes first, a flush of the tier loses instead: then Hudi upserts again)
        version, hudis, refused = 2, set(), set()
        for _ in range(3):
            theirs, their_version = batch(rng, rng.sample(range(KEYS), 600), version), version
            version += 1
            failure: list[BaseException] = []

            def hudi_upsert(rows: pa.Table = theirs, failed: list[BaseException] = failure) -> None:
                try:
                    spark.write(path, rows, options)
                except HudiSparkError as e:
                    failed.append(e)

            writer = threading.Thread(target=hudi_upsert)
            writer.start()
            deadline = time.monotonic() + 300
            while (inflight := hudi_writing(path)) is None:
                assert writer.is_alive() and time.monotonic() < deadline, "Hudi's deltacommit never went inflight"
                time.sleep(0.05)
            while writer.is_alive():  # flushes complete while Hudi's commit is inflight
                ours = batch(rng, rng.sample(range(KEYS), 300), version)
                client.write("t", ours)
                model.upsert(version, ours.to_pylist())
                version += 1
                try:
                    client.flush("t")
                except CommitFailedError as e:
                    refused.add(refused_instant(e))
                assert time.monotonic() < deadline, "Hudi's write did not end"
            writer.join()
            if failure:
                break
            model.upsert(their_version, theirs.to_pylist())  # Hudi won this one
        assert failure and "HoodieWriteConflictException" in str(failure[0]), failure
        hudis.add(inflight)
        client.flush("t")  # what a refused flush left
        assert data(client.read("t")) == project(model.rows(), COLUMNS)  # none of the loser's rows

        # the tier loses: a Hudi commit completes into the file groups of a pending flush
        ours = batch(rng, rng.sample(range(KEYS), 300), version)
        client.write("t", ours)
        model.upsert(version, ours.to_pylist())
        theirs = batch(rng, rng.sample(range(KEYS), 500), version + 1)
        failpoints.arm(failpoints.BEFORE_FLUSH_COMMIT, lambda: spark.write(path, theirs, options))
        with pytest.raises(CommitFailedError, match="another writer") as refusal:
            client.flush("t")
        model.upsert(version + 1, theirs.to_pylist())
        refused.add(refused_instant(refusal.value))
        assert refused <= rolled_back(path)  # rolled back by the master
        assert client.flush("t")  # its rows, flushed again
        want = project(model.rows(), COLUMNS)
        assert data(client.read("t")) == want
    finally:
        cluster.close()
    assert data(spark.read(path)) == want
    assert data(HudiTable.open(path).read()) == want
    assert data(hudi_rs_read(path)) == want
    # Hudi rolled back none of the tier's instants (its failed one, lazily, when it expired)
    assert rolled_back(path) - hudis == refused
