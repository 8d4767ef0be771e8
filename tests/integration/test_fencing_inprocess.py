"""Fencing, in process: a table server taken for dead while a write or a flush of it is
held at a failpoint (as a paused process would be) acknowledges and commits nothing for the
buckets it lost, and every write acknowledged anywhere is read once, by memtier and hudi-rs,
also after the new owner recovers again. The same scenarios run against real processes
stopped with SIGSTOP in test_fencing_ray.py."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pytest

from memtier import failpoints
from memtier.client import Client
from memtier.errors import FencedError
from memtier.hudi.routing import bucket_ids
from memtier.io import open_fileio
from memtier.wal.fence import read_bounds
from memtier.wal.stream import stream_directory
from tests.support.acked import SCHEMA, Acked, batch
from tests.support.clock import ManualClock
from tests.support.hudirs import hudi_rs_read
from tests.support.inprocess import InProcessCluster
from tests.support.waiting import in_thread

BUCKETS = 8


@pytest.fixture(params=["keyed", "append-only"])
def cluster(request: pytest.FixtureRequest, tmp_path) -> Iterator[InProcessCluster]:
    running = InProcessCluster(str(tmp_path / "root"), clock=ManualClock())
    running.add_server("ts-0")  # ts-0 holds every bucket: a write goes there whole (the
    running.master.create_table("t", SCHEMA, "id" if request.param == "keyed" else None,
                                ordering_field="ts", buckets=BUCKETS)
    running.add_server("ts-1")  # failpoints are this process's, not one server's)
    yield running
    running.close()


def write(client: Client, model: Acked, data: pa.Table) -> None:
    client.write("t", data)
    model.acknowledged(data)


class Held:
    """A failpoint action that holds the thread reaching it until released."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> None:
        self.reached.set()
        assert self.release.wait(60), "never released"



def check_everywhere(cluster: InProcessCluster, model: Acked) -> None:
    """memtier before and after a flush, hudi-rs after it, and again after the new owner
    recovered its buckets anew (the fenced life's segments read only up to the fence)."""
    client = cluster.client()
    model.check(client.read("t"), "memtier (latest)")
    cluster.restart_server("ts-1")
    model.check(cluster.client().read("t"), "memtier after the new owner restarted")
    client = cluster.client()
    client.flush("t")
    model.check(client.read("t"), "memtier after a flush")
    model.check(hudi_rs_read(cluster.master.describe_table("t")["path"]), "hudi-rs")


@pytest.mark.parametrize("point", [failpoints.BEFORE_APPEND, failpoints.BEFORE_SYNC, failpoints.BEFORE_ACK])
def test_a_write_held_while_its_server_is_taken_for_dead_is_read_once(
    cluster: InProcessCluster, point: str
) -> None:
    keyed = cluster.master.describe_table("t")["record_key"] != []
    model = Acked(keyed)
    old = cluster.client()  # routes to ts-0 as placed now
    write(old, model, batch(list(range(200)), 1))
    ids = list(range(0, 200, 3)) if keyed else list(range(1000, 1050))
    held = Held()
    failpoints.arm(point, held)
    late = batch([*ids, *range(5000, 5020)], 2)  # keys 5000-5019 are never written again
    thread, outcome = in_thread(lambda: old.write("t", late))
    assert held.reached.wait(30)
    cluster.take_for_dead("ts-0")
    new = cluster.client()
    write(new, model, batch(ids, 3))  # newer versions, acknowledged by ts-1
    held.release.set()
    thread.join(60)
    assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
    model.acknowledged(late)  # retried on ts-1 if ts-0 refused it: acknowledged once either way
    zombie = cluster.servers["ts-0"]
    zombie.heartbeat(cluster.location("ts-0"))  # what its heartbeat thread does on waking
    assert zombie.owned("t") == set()  # it reset and joined again as a new life, with no buckets
    write(old, model, batch(ids, 4))  # the old client, re-routed
    check_everywhere(cluster, model)


def test_a_flush_held_before_its_commit_is_refused_once_its_server_lost_its_buckets(
    cluster: InProcessCluster
) -> None:
    keyed = cluster.master.describe_table("t")["record_key"] != []
    model = Acked(keyed)
    client = cluster.client()
    for ts in range(1, 4):
        write(client, model, batch(list(range(ts * 100, ts * 100 + 300)), ts))
    held = Held()
    failpoints.arm(failpoints.BEFORE_FLUSH_COMMIT, held)
    zombie = cluster.servers["ts-0"]
    thread, outcome = in_thread(lambda: zombie.flush("t", seal=True))
    assert held.reached.wait(30)
    cluster.take_for_dead("ts-0")
    assert not list(cluster.master.meta("t").timeline().pending(None)), "the fenced flush is rolled back at once"
    held.release.set()
    thread.join(60)
    assert len(outcome) == 1 and isinstance(outcome[0], FencedError), outcome
    assert "lost its buckets" in str(outcome[0])
    timeline = cluster.master.meta("t").timeline()
    assert not list(timeline.pending(None)), "the refused flush was rolled back"
    assert zombie.owned("t") == set()  # it reset itself: nothing of the table in memory
    write(cluster.client(), model, batch(list(range(50)), 9))
    check_everywhere(cluster, model)


def test_the_fence_bounds_what_recovery_reads_of_the_fenced_life(
    cluster: InProcessCluster
) -> None:
    """Writes the fenced server appends after its fence lie beyond the recorded bounds:
    never acknowledged, never recovered (an append-only table would show them twice)."""
    keyed = cluster.master.describe_table("t")["record_key"] != []
    model = Acked(keyed)
    old = cluster.client()
    write(old, model, batch(list(range(100)), 1))
    life = cluster.servers["ts-0"].life
    cluster.take_for_dead("ts-0")
    late = batch(list(range(500, 520)), 2)
    zombie = cluster.servers["ts-0"]
    with pytest.raises(FencedError):  # straight to the zombie, as a client with old routes does
        zombie.write("t", late, producer_id=b"z" * 16, producer_seq=1)
    bounds = read_bounds(open_fileio(cluster.wal_root), stream_directory(cluster.wal_root, "t"))
    assert set(bounds) == {life} and bounds[life].server == "ts-0" and bounds[life].fenced_by == "ts-1"
    check_everywhere(cluster, model)


def test_a_write_held_while_its_bucket_is_moved_away_lands_on_the_new_owner(
    cluster: InProcessCluster,
) -> None:
    """A graceful move (rebalance: the old owner releases, the new one recovers) that
    overtakes a write the old owner has routed but not appended: the write is refused
    there, under the file group's lock, and retried on the new owner."""
    if cluster.master.describe_table("t")["record_key"] == []:
        pytest.skip("a keyed table's rows choose their bucket")
    model = Acked(True)
    old = cluster.client()
    write(old, model, batch(list(range(200)), 1))
    ids = [i for i in range(200) if int(bucket_ids(pa.table({"id": [i]}), ["id"], BUCKETS)[0]) == 3]
    held = Held()
    failpoints.arm(failpoints.BEFORE_APPEND, held)
    late = batch(ids, 2)
    thread, outcome = in_thread(lambda: old.write("t", late))
    assert held.reached.wait(30)
    budget = cluster.config.memory_budget
    cluster.master.heartbeat("ts-0", {"memory_used": budget}, {("t", 3): budget // 2},
                             life=cluster.servers["ts-0"].life)
    cluster.master.heartbeat("ts-1", {"memory_used": 0}, {}, life=cluster.servers["ts-1"].life)
    assert cluster.master.rebalance() == ("t", 3, "ts-0", "ts-1")
    held.release.set()
    thread.join(60)
    assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
    model.acknowledged(late)
    assert cluster.servers["ts-1"].owned("t") == {3}
    check_everywhere(cluster, model)


def test_only_a_fenced_life_is_told_to_reset(cluster: InProcessCluster) -> None:
    """A life taken for dead hears it at its next heartbeat; a life not registered yet (a
    restart, or the one after a reset) is told to register, not to reset again."""
    old = cluster.servers["ts-0"].life
    cluster.take_for_dead("ts-0")
    assert cluster.master.heartbeat("ts-0", {}, life=old) == {"registered": False, "fenced": True}
    assert cluster.master.heartbeat("ts-0", {}, life="0123456789abcdef") == {"registered": False, "fenced": False}
    with pytest.raises(FencedError, match="was fenced"):
        cluster.master.register_server("ts-0", "inprocess://ts-0/x", 1 << 20, life=old)


def _survivor_of_a_clustered_bucket(tmp_path, keyed: bool) -> tuple[InProcessCluster, Acked]:
    """Two servers that both opened the table, a clustering that put every bucket in a new
    file group, and ts-0 flushed (it writes into the new ones from now on; ts-1 does not
    know them): returns the cluster and what it holds."""
    cluster = InProcessCluster(str(tmp_path / "root"), clock=ManualClock())
    cluster.add_server("ts-0")
    cluster.add_server("ts-1")  # both open the table now: each knows its file groups
    cluster.master.create_table("t", SCHEMA, "id" if keyed else None, ordering_field="ts", buckets=4)
    client, model = cluster.client(), Acked(keyed)
    ids = list(range(40))
    write(client, model, batch(ids, 1))
    client.flush("t")
    cluster.run_service("t", "clustering")  # every bucket in a new file group
    write(client, model, batch(ids, 2))
    cluster.servers["ts-0"].flush("t", seal=True)
    return cluster, model


def test_a_retry_of_a_write_the_dead_server_held_is_dropped_whichever_file_group_holds_it(tmp_path) -> None:
    """A write ts-0 applied but did not acknowledge (it was taken for dead first) is sent
    again to ts-1, which recovered it under the file group ts-0 wrote to and writes the
    bucket under the one it knew: the retry is dropped, not appended a second time (after
    a delete of its keys, read in write order, it would bring them back)."""
    cluster, model = _survivor_of_a_clustered_bucket(tmp_path, keyed=True)
    try:
        routing = cluster.master.describe_table("t")["routing"]
        ids = [i for i in range(100, 200) if routing[str(int(bucket_ids(pa.table({"id": [i]}), ["id"], 4)[0]))] == "ts-0"]
        late, producer = batch(ids, 3), b"p" * 16
        assert cluster.servers["ts-0"].write("t", late, producer_id=producer, producer_seq=1).rows == len(ids)
        model.acknowledged(late)
        cluster.take_for_dead("ts-0")
        retry = cluster.servers["ts-1"].write("t", late, producer_id=producer, producer_seq=1)
        assert (retry.rows, retry.duplicate_rows) == (0, len(ids)), retry
        groups = {k.file_id for k in cluster.servers["ts-1"]._tables["t"].groups}
        assert len(groups) > 4, f"the new owner holds one file group a bucket: {groups}"
        check_everywhere(cluster, model)
    finally:
        cluster.close()


def test_a_moved_bucket_held_under_two_file_groups_is_read_in_write_order(tmp_path) -> None:
    """The new owner of a bucket holds the rows it recovered under the file group the
    dead server wrote to (the one a clustering made) and writes its own under the one it
    knew (the replaced one): a read takes them as one, in write order, so a key deleted
    on the dead server and written again on the new owner reads as written (the soak's
    lookups found such keys deleted, or at an older version)."""
    cluster, model = _survivor_of_a_clustered_bucket(tmp_path, keyed=True)
    try:
        routing = cluster.master.describe_table("t")["routing"]
        client, ids = cluster.client(), list(range(40))
        moved = [i for i in ids if routing[str(int(bucket_ids(pa.table({"id": [i]}), ["id"], 4)[0]))] == "ts-0"]
        client.delete("t", {"id": moved})  # held by ts-0, under the new file groups
        model.rows = +Counter({row: n for row, n in model.rows.items() if row[0] not in moved})
        cluster.take_for_dead("ts-0")  # ts-1 recovers the deletes
        client = cluster.client()
        write(client, model, batch(moved, 3))  # ts-1 writes them again, under the replaced file groups
        groups = {k.file_id for k in cluster.servers["ts-1"]._tables["t"].groups}
        assert len(groups) > 4, f"the new owner holds one file group a bucket: {groups}"
        found = client.lookup("t", moved, columns=["id", "ts"])
        assert sorted(zip(found["id"].to_pylist(), found["ts"].to_pylist(), strict=True)) == [(i, 3) for i in moved]
        model.check(client.read("t"), "memtier (latest)")
        check_everywhere(cluster, model)
    finally:
        cluster.close()
