"""A read reuses its previous read point without asking the master while no commit was
made since, and otherwise asks the table servers at that point while the master plans
the new one, keeping their answer only when the point did not move: on one process and
over real Arrow Flight, a lookup after a commit, a flush, an abort, a transaction begun
since or a bucket moved equals what a fresh plan reads, and in a steady state each
owning table server is asked once and the master not at all."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest

from memtier import failpoints
from memtier.client import Client, Transaction
from memtier.errors import NotFoundError
from memtier.hudi.keys import bucket_ids
from tests.support.inprocess import InProcessCluster
from tests.support.rpccluster import CLUSTER_KINDS, RpcCluster, two_servers

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("ts", pa.int64()), ("v", pa.string())])


def rows(ids: list[int], ts: int, v: str) -> pa.Table:
    return pa.table({"id": ids, "region": [f"r{i % 2}" for i in ids], "ts": [ts] * len(ids),
                     "v": [v] * len(ids)}, schema=SCHEMA)


def value(client: Client, key: int) -> list[tuple[int, str]]:
    found = client.lookup("t", [key])
    return list(zip(found.column("ts").to_pylist(), found.column("v").to_pylist(), strict=True))


@pytest.fixture(params=CLUSTER_KINDS)
def cluster(request: pytest.FixtureRequest, tmp_path) -> Iterator[InProcessCluster | RpcCluster]:
    with two_servers(request.param, str(tmp_path / "cluster")) as cluster:
        yield cluster


@pytest.fixture
def client(cluster: InProcessCluster | RpcCluster) -> Iterator[Client]:
    client = cluster.client()
    client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", partition_fields="region", buckets=4)
    yield client
    client.close()


def test_rows_of_a_transaction_aborted_since_the_last_read_are_not_shown(client: Client) -> None:
    client.write("t", rows([1, 2], 1, "a"))
    tx = Transaction(client, "t", "batch")
    tx.write(rows([1], 9, "tx"))
    assert value(client, 1) == [(9, "tx")]  # latest: an open transaction's rows show
    tx.abort()  # the previous read point still has the transaction open
    assert value(client, 1) == [(1, "a")]
    assert value(client, 2) == [(1, "a")]


def test_rows_flushed_since_the_last_read_are_read_once(
    cluster: InProcessCluster | RpcCluster, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.write("t", rows([1, 2, 3], 1, "a"))
    assert value(client, 1) == [(1, "a")]  # the read point: no commit yet
    client.flush("t")  # the flushed blocks stay listed for readers of the old point
    assert value(client, 1) == [(1, "a")]
    client.write("t", rows([2], 2, "b"))
    client.flush("t")
    monkeypatch.setattr("memtier.tableserver.flushes._FLUSHED_GRACE_S", 0.0)
    time.sleep(0.01)
    for server in cluster.servers.values():
        server.maintain()  # forgets the flushed blocks: their rows are in the files only
    client.write("t", rows([3], 3, "c"))
    assert [value(client, k) for k in (1, 2, 3)] == [[(1, "a")], [(2, "b")], [(3, "c")]]


def test_a_lookup_asks_the_owning_table_server_once_when_nothing_was_committed(
    cluster: InProcessCluster | RpcCluster, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.write("t", rows(list(range(20)), 1, "a"))
    value(client, 5)
    asked: list[Any] = []
    for server in cluster.servers.values():
        read = server.read
        monkeypatch.setattr(server, "read", lambda *a, _read=read, **k: asked.append(a) or _read(*a, **k))
    for ts in range(2, 6):
        client.write("t", rows([5], ts, f"v{ts}"))
        assert value(client, 5) == [(ts, f"v{ts}")]
    assert len(asked) == 4


def test_a_lookup_asks_the_master_only_once_a_commit_moved_the_read_point(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.write("t", rows([5], 1, "a"))
    assert value(client, 5) == [(1, "a")]
    plans: list[Any] = []
    read_plan = client.master.read_plan
    monkeypatch.setattr(client.master, "read_plan", lambda *a, **k: plans.append(a) or read_plan(*a, **k))
    for ts in range(2, 6):
        client.write("t", rows([5], ts, f"v{ts}"))
        assert value(client, 5) == [(ts, f"v{ts}")]
    assert plans == []
    client.flush("t")  # a deltacommit: the point moved
    client.write("t", rows([5], 6, "v6"))
    assert value(client, 5) == [(6, "v6")]
    assert len(plans) == 1
    assert value(client, 5) == [(6, "v6")]
    assert len(plans) == 1


def test_a_transaction_begun_since_the_last_read_shows_as_its_outcome_says(client: Client) -> None:
    client.write("t", rows([1, 2], 1, "a"))
    assert value(client, 1) == [(1, "a")]  # the read point knows no transaction
    aborted = Transaction(client, "t", "aborted")
    aborted.write(rows([1], 9, "gone"))
    aborted.abort()
    assert value(client, 1) == [(1, "a")]
    committed = Transaction(client, "t", "committed")
    committed.write(rows([2], 9, "tx"))

    def read_committed() -> list[tuple[int, str]]:
        found = client.read("t", "committed", filters=[("id", "=", 2)])
        return list(zip(found.column("ts").to_pylist(), found.column("v").to_pylist(), strict=True))

    assert read_committed() == [(1, "a")]
    committed.commit()
    assert read_committed() == [(9, "tx")]
    assert value(client, 2) == [(9, "tx")]


def test_a_bucket_moved_since_the_last_read_is_read_from_its_new_owner(
    cluster: InProcessCluster | RpcCluster, client: Client
) -> None:
    writer = cluster.client()  # the reader's routing stays as its last read left it
    writer.write("t", rows([1], 1, "a"))
    assert value(client, 1) == [(1, "a")]
    bucket = int(bucket_ids(pa.table({"id": [1]}), ["id"], 4)[0])
    routing = cluster.master.describe_table("t")["routing"]
    owner = routing[bucket] if bucket in routing else routing[str(bucket)]
    other = next(s for s in cluster.servers if s != owner)
    budget = cluster.config.memory_budget
    cluster.master.heartbeat(owner, {"memory_used": budget}, {("t", bucket): budget // 2},
                             life=cluster.servers[owner].life)
    cluster.master.heartbeat(other, {"memory_used": 0}, {}, life=cluster.servers[other].life)
    assert cluster.master.rebalance() == ("t", bucket, owner, other)
    writer.write("t", rows([1], 2, "b"))  # acknowledged by the new owner
    assert value(client, 1) == [(2, "b")]
    writer.close()


def test_a_file_gone_under_a_reused_read_point_is_read_under_a_new_plan(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.write("t", rows([3], 1, "a"))
    client.flush("t")
    assert value(client, 3) == [(1, "a")]  # the point: the flush's instant
    plans: list[Any] = []
    read_plan = client.master.read_plan
    monkeypatch.setattr(client.master, "read_plan", lambda *a, **k: plans.append(a) or read_plan(*a, **k))
    read_planned = client._read_planned
    failed: list[bool] = []

    def cleaned_once(r: Any, plan: Any, buckets: Any, memory: Any = None, timeline: Any = None) -> Any:
        if timeline is not None and not failed:  # the reused point's read finds a slice cleaned
            failed.append(True)
            raise NotFoundError("no such file: a slice a clean deleted")
        return read_planned(r, plan, buckets, memory, timeline)

    monkeypatch.setattr(client, "_read_planned", cleaned_once)
    assert value(client, 3) == [(1, "a")]
    assert failed and len(plans) == 1


def owner_of(cluster: InProcessCluster | RpcCluster, key: int) -> str:
    """The table server holding ``key``'s bucket of table ``t``."""
    bucket = int(bucket_ids(pa.table({"id": [key]}), ["id"], 4)[0])
    routing = cluster.master.describe_table("t")["routing"]
    return routing[bucket] if bucket in routing else routing[str(bucket)]


@pytest.mark.parametrize("reuse", [True, False], ids=["reused-point", "new-plan"])
def test_a_flush_completing_after_a_later_one_is_read_by_a_read_that_listed_it_pending(
    cluster: InProcessCluster | RpcCluster, client: Client, monkeypatch: pytest.MonkeyPatch, reuse: bool
) -> None:
    """Flushes of two table servers complete out of instant order: server a's, begun
    first, waits before its commit while b's completes. A read that saw a's instant
    pending (its file listing lacks it) and asks a once a's flush completed must still
    get a's rows from a (found by the chaos soak, issue 29: lookups read a key's older
    version for a moment after faults slowed one server's flush)."""
    a_key = next(k for k in range(100) if owner_of(cluster, k) == "a")
    b_key = next(k for k in range(100) if owner_of(cluster, k) == "b")
    writer = cluster.client()
    writer.write("t", rows([a_key, b_key], 1, "old"))
    writer.flush("t")
    writer.write("t", rows([a_key], 2, "new"))  # in a's memory only
    writer.write("t", rows([b_key], 2, "new"))
    with a_flush_held_while_b_flushes(cluster, "t") as complete:
        if reuse:  # the reader's point: b's flush, a's still pending
            assert value(client, b_key) == [(2, "new")]
        real_read = cluster.servers["a"].read

        def after_a_flushed(*args: Any, **kwargs: Any) -> Any:
            complete()
            return real_read(*args, **kwargs)

        monkeypatch.setattr(cluster.servers["a"], "read", after_a_flushed)
        assert value(client, a_key) == [(2, "new")]  # (a new plan lists its files before asking a)
    monkeypatch.undo()
    assert value(client, a_key) == [(2, "new")]
    writer.close()


@contextmanager
def a_flush_held_while_b_flushes(cluster: InProcessCluster | RpcCluster, table: str) -> Iterator[Callable[[], None]]:
    """Server a's flush of ``table`` begun and held before its commit while server b's
    (a later instant) completes; yields what lets a's complete (and waits for it)."""
    held, go = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        assert go.wait(60)

    failpoints.arm(failpoints.BEFORE_FLUSH_COMMIT, hold)
    a_flush = threading.Thread(target=cluster.servers["a"].flush, args=(table,), kwargs={"seal": True})
    a_flush.start()

    def complete() -> None:
        go.set()
        a_flush.join(60)
        assert not a_flush.is_alive(), "a's flush hangs"

    try:
        assert held.wait(60), "a's flush never reached its commit"
        assert cluster.servers["b"].flush(table, seal=True)
        yield complete
    finally:
        complete()


def test_rows_of_a_flush_pending_at_the_plan_and_completed_before_the_files_are_listed_are_read_once(
    cluster: InProcessCluster | RpcCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append-only table keeps every row, so a row read both from a server (its
    flush was pending at the plan) and from the files (it completed before they were
    listed) would show twice: the files are read with the plan's pending flushes pending."""
    client = cluster.client()
    client.create_table("e", SCHEMA, record_key=None, buckets=4)
    for n in range(8):  # writes rotate over the buckets: rows on both servers
        client.write("e", rows([10 * n, 10 * n + 1], n, f"w{n}"))
    assert {s: bool(sum(t["unflushed_rows"] for t in server.status()["tables"].values()))
            for s, server in cluster.servers.items()} == {"a": True, "b": True}
    with a_flush_held_while_b_flushes(cluster, "e") as complete:
        real_plan = cluster.master.read_plan

        def planned_then_a_completes(*args: Any, **kwargs: Any) -> Any:
            plan = real_plan(*args, **kwargs)
            assert plan["pending"], "a's flush was pending at the plan"
            complete()
            return plan

        monkeypatch.setattr(cluster.master, "read_plan", planned_then_a_completes)
        assert sorted(client.read("e")["id"].to_pylist()) == sorted(i for n in range(8) for i in (10 * n, 10 * n + 1))
    client.close()


def test_a_read_point_whose_pending_flush_completed_is_not_reused(
    cluster: InProcessCluster | RpcCluster, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A point reads its pending flushes from the servers, which list flushed blocks
    for a minute only: once one of them completed, a read plans a new point."""
    a_key = next(k for k in range(100) if owner_of(cluster, k) == "a")
    b_key = next(k for k in range(100) if owner_of(cluster, k) == "b")
    client.write("t", rows([a_key, b_key], 1, "old"))
    with a_flush_held_while_b_flushes(cluster, "t") as complete:
        assert value(client, a_key) == [(1, "old")]  # the point: b's flush, a's pending
        complete()
    monkeypatch.setattr("memtier.tableserver.flushes._FLUSHED_GRACE_S", 0.0)
    time.sleep(0.01)
    for server in cluster.servers.values():
        server.maintain()  # forgets the flushed blocks: their rows are in the files only
    assert value(client, a_key) == [(1, "old")]


def test_a_flush_retried_after_a_rollback_is_read_though_a_reader_cached_the_rolled_back_file(
    cluster: InProcessCluster | RpcCluster, client: Client
) -> None:
    """A flush whose files were written fails before its commit (a killed flush worker, a
    fenced server) and is rolled back; the retry flushes the same blocks into the same
    file group. A reader that read the rolled-back log file meanwhile must read the
    retry's, not what it kept of the first (found by the chaos soak, issue 29: lookups
    read an older version, or none, for a few seconds after a flush worker was killed)."""
    a_key = next(k for k in range(100) if owner_of(cluster, k) == "a")
    writer = cluster.client()
    writer.write("t", rows([a_key], 1, "old"))
    writer.flush("t")
    writer.write("t", rows([a_key], 2, "new"))
    held, go = threading.Event(), threading.Event()

    def fail_after_reads() -> None:
        held.set()
        assert go.wait(60)
        raise OSError("the flush worker died")

    failpoints.arm(failpoints.BEFORE_FLUSH_COMMIT, fail_after_reads)
    failed: list[BaseException] = []
    first = threading.Thread(target=lambda: _catching(failed, lambda: cluster.servers["a"].flush("t", seal=True)))
    first.start()
    try:
        assert held.wait(60), "a's flush never reached its commit"
        assert value(client, a_key) == [(2, "new")]  # reads the rolled-back attempt's log file
    finally:
        go.set()
        first.join(60)
    assert failed, "the first attempt failed"
    assert cluster.servers["a"].flush("t", seal=True)  # the same blocks again
    assert value(client, a_key) == [(2, "new")]


def _catching(caught: list[BaseException], call: Callable[[], object]) -> None:
    try:
        call()
    except Exception as e:
        caught.append(e)
