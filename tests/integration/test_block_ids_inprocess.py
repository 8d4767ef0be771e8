"""Block ids after a bucket moves away and back, in process (issue 29, found by the chaos
soak with ``wal.retention-bytes=0``): a write that passed the ownership check of a table
server just before the bucket was released (a rebalance) made an empty file group there
before it was refused. When the bucket came back, with no block of it left in the WAL (all
flushed, their segments deleted), that leftover numbered new blocks from where the server
had last flushed the bucket, not from the blocks flushed since by the other owner: ids the
master already records as flushed. Such a block's WAL segment was then deleted as flushed,
and recovery after a crash skipped it: acknowledged writes lost."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pyarrow as pa
import pytest

from memtier import failpoints
from memtier.config import WalConfig
from memtier.errors import NotOwnerError
from memtier.hudi.routing import bucket_ids
from tests.support.acked import SCHEMA, Acked, batch
from tests.support.inprocess import InProcessCluster

BUCKETS = 2
#: Flushed segments deleted at once; a new segment for every write.
EAGER = WalConfig(retention=timedelta(0), retention_bytes=0, segment_bytes=1,
                  segment_age=timedelta(milliseconds=1))
MOVED = 1  # the bucket that moves away and back
KEYS = [i for i in range(100) if int(bucket_ids(pa.table({"id": [i]}), ["id"], BUCKETS)[0]) == MOVED]


def sweep_wal(cluster: InProcessCluster) -> None:
    """Every server deletes what the WAL holds of flushed blocks (segments past their age)."""
    time.sleep(3 * EAGER.segment_age.total_seconds())
    for server in cluster.servers.values():
        server.delete_expired_wals()


@pytest.fixture
def cluster(tmp_path) -> Iterator[InProcessCluster]:
    running = InProcessCluster(str(tmp_path / "root"), wal_config=EAGER)
    yield running
    running.close()


def test_a_bucket_back_from_another_server_numbers_its_blocks_after_the_flushed_ones(
    cluster: InProcessCluster,
) -> None:
    a = cluster.add_server("a")
    cluster.master.create_table("t", SCHEMA, "id", ordering_field="ts", buckets=BUCKETS)
    cluster.add_server("b")  # a holds both buckets
    client = cluster.client()
    model = Acked(keyed=True)

    def write(ts: int) -> None:
        data = batch(KEYS, ts)
        client.write("t", data)
        model.acknowledged(data)

    write(1)
    client.flush("t")

    # a write routed to a, held past its ownership check while the bucket moves to b
    failpoints.arm(failpoints.BEFORE_APPEND, lambda: cluster.master.move_bucket("t", MOVED, "a", "b"))
    with pytest.raises(NotOwnerError):
        a.write("t", batch(KEYS, 2))

    for ts in range(3, 6):  # b numbers on, past what a flushed
        write(ts)
        client.flush("t")
    sweep_wal(cluster)  # no block of the bucket is left in the WAL
    cluster.master.move_bucket("t", MOVED, "b", "a")  # (a rebalance)
    write(6)  # acknowledged by a
    sweep_wal(cluster)
    cluster.restart_server("a")  # what a held comes back from the WAL

    model.check(cluster.client().read("t"), "memtier")


class MasterDied(Exception):
    """The master's process ended here (its calls after this never happen)."""


@pytest.mark.parametrize("dies", ["before the target takes the bucket", "after the target took it"])
def test_a_master_that_dies_inside_a_bucket_move_leaves_one_owner(
    cluster: InProcessCluster, monkeypatch: pytest.MonkeyPatch, dies: str
) -> None:
    """A rebalance moving a bucket between two live servers, the master gone mid-way: once
    the servers register with the next master, exactly one holds the bucket, and every
    acknowledged write of it is read (with the new owner saved only after the target took
    it, the source took it back while the target kept it: two owners)."""
    a = cluster.add_server("a")
    cluster.master.create_table("t", SCHEMA, "id", ordering_field="ts", buckets=BUCKETS)
    b = cluster.add_server("b")
    client = cluster.client()
    model = Acked(keyed=True)
    data = batch(KEYS, 1)
    client.write("t", data)
    model.acknowledged(data)
    taken = b.acquire

    def acquire_then_die(table: str, buckets: list[int], *, life: str | None = None) -> None:
        if dies == "after the target took it":
            taken(table, buckets, life=life)
        raise MasterDied(dies)

    monkeypatch.setattr(b, "acquire", acquire_then_die)
    with pytest.raises(MasterDied):
        cluster.master.move_bucket("t", MOVED, "a", "b")
    monkeypatch.undo()
    cluster.restart_master()
    assert [s for s, server in sorted(cluster.servers.items()) if MOVED in server.owned("t")] in (["a"], ["b"])
    client = cluster.client()
    data = batch(KEYS, 2)
    client.write("t", data)
    model.acknowledged(data)
    model.check(client.read("t"), "memtier")
    assert a is cluster.servers["a"]
