"""Fencing on real processes: a table server (or the master) stopped with SIGSTOP, as a
long GC pause, a stalled disk or a frozen VM stops it, and continued. A table server taken
for dead meanwhile acknowledges nothing and commits nothing for the buckets it lost, also
when it was stopped at the worst moment of a write or a flush (failpoints); a pause shorter
than the heartbeat timeout, or a pause of the master, moves nothing. Every acknowledged
row is read once, by memtier and by hudi-rs (and Apache Hudi on Spark, once)."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from memtier import failpoints
from memtier.client import Client
from memtier.errors import FencedError
from memtier.hudi.tablemeta import TableMeta
from memtier.io import open_fileio
from memtier.tableserver.service import TableServerProxy
from tests.support.acked import SCHEMA, Acked, batch
from tests.support.hudi_spark import HudiSpark
from tests.support.hudirs import hudi_rs_read
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ray = pytest.importorskip("ray")

MASTER = "memtier-master"
TIMEOUT_S = 2.0  # cluster.heartbeat-timeout, as in the runs
BUCKETS = 8


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    import memtier

    root = tmp_path_factory.mktemp("memtier-fencing")
    running = memtier.start_local(str(root), table_servers=2, config={
        "cluster.heartbeat-timeout": f"{TIMEOUT_S}s", "tableserver.failpoints": "true",
    })
    yield running
    running.shutdown()


@pytest.fixture(autouse=True)
def whole(cluster: object) -> None:
    """Every table server alive before a test: one a test before stopped may still be
    resetting into a new life, and a table made meanwhile would place no bucket on it."""
    client = cluster.client()  # type: ignore[attr-defined]
    wait_until(lambda: set(lives(client)) == {"ts-0", "ts-1"} and all(lives(client).values()),
               "both table servers to be alive", 60)


@pytest.fixture
def stopped() -> Iterator[list[int]]:
    """Processes a test stopped: continued at its end whatever happened."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        _continue(pid)


def _continue(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def is_stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def new_table(client: Client, keyed: bool = True) -> str:
    name = f"t_{uuid.uuid4().hex[:8]}"
    client.create_table(name, SCHEMA, record_key="id" if keyed else None, ordering_field="ts", buckets=BUCKETS)
    return name


def routing(client: Client, table: str) -> dict[int, str]:
    return {int(b): s for b, s in client.describe(table)["routing"].items()}


def lives(client: Client) -> dict[str, str]:
    return {s: info.get("life", "") for s, info in client.status()["servers"].items()}


class Writer:
    """Writes batches of random keys (the old client's routes) on a thread until stopped;
    every write whose call returned is acknowledged."""

    def __init__(self, client: Client, table: str, model: Acked, first_ts: int) -> None:
        self.client, self.table, self.model, self.ts = client, table, model, first_ts
        self.errors: list[Exception] = []
        self.writes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.ts += 1
            data = batch(sorted(set(int(i) for i in _random_ids(self.ts))), self.ts)
            try:
                self.client.write(self.table, data)
            except Exception as e:  # noqa: BLE001 - reported by stop()
                self.errors.append(e)
                return
            self.model.acknowledged(data)
            self.writes += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), "the writer hangs"
        assert not self.errors, self.errors


def _random_ids(seed: int) -> list[int]:
    import random

    return random.Random(seed).sample(range(20_000), 100)


def write_batches(client: Client, table: str, model: Acked, first_ts: int, count: int) -> int:
    """``count`` writes of 100 random keys at ordering values from ``first_ts``; the next."""
    for ts in range(first_ts, first_ts + count):
        data = batch(_random_ids(ts), ts)
        client.write(table, data)
        model.acknowledged(data)
    return first_ts + count


def settle_and_check(cluster: object, table: str, model: Acked, hudi_spark: HudiSpark | None = None) -> None:
    client = cluster.client()  # type: ignore[attr-defined]
    model.check(client.read(table), "memtier (latest)")
    client.flush(table)
    model.check(client.read(table), "memtier after a flush")
    path = client.describe(table)["path"]
    # hudi-rs 0.5 reads file groups of a pending compaction as they were when it was
    # planned (docs/limits.md): it reads once the pool has none running
    wait_until(lambda: not TableMeta.load(open_fileio(path), path).timeline().pending(None),
               "the table services to finish", 120)
    model.check(hudi_rs_read(path), "hudi-rs")
    if hudi_spark is not None:
        model.check(hudi_spark.read(path), "Apache Hudi on Spark")


def test_a_table_server_stopped_past_the_timeout_loses_no_acknowledged_write(
    cluster: object, stopped: list[int], hudi_spark: HudiSpark
) -> None:
    """The issue's run: ts-0 stopped 7 s, its buckets move, a new client writes, ts-0 is
    continued and the old client (still routing to it) writes 40 batches."""
    old = cluster.client()  # type: ignore[attr-defined]
    table = new_table(old)
    model = Acked(keyed=True)
    ts = write_batches(old, table, model, 1, 10)
    pid = cluster.pids()["ts-0"]  # type: ignore[attr-defined]
    before = lives(old)["ts-0"]
    os.kill(pid, signal.SIGSTOP)
    stopped.append(pid)
    wait_until(lambda: "ts-0" not in routing(old, table).values(), "ts-0's buckets to move", 30)
    new = cluster.client()  # type: ignore[attr-defined]
    ts = write_batches(new, table, model, ts, 10)
    time.sleep(max(0.0, 7.0 - TIMEOUT_S))  # the 7 s stop
    _continue(pid)
    write_batches(old, table, model, ts, 40)
    wait_until(lambda: lives(old)["ts-0"] not in ("", before), "ts-0 to reset into a new life", 30)
    settle_and_check(cluster, table, model, hudi_spark)


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "append-only"])
@pytest.mark.parametrize("point", [failpoints.BEFORE_APPEND, failpoints.BEFORE_SYNC, failpoints.BEFORE_ACK])
def test_a_table_server_stopped_inside_a_write_loses_nothing_and_doubles_nothing(
    cluster: object, stopped: list[int], point: str, keyed: bool
) -> None:
    """ts-0 stops itself at ``point`` of a write; taken for dead, its buckets move while
    a new client writes; continued, the write it held is refused or was recovered: either
    way it is read once (an append-only table shows a doubled row)."""
    old = cluster.client()  # type: ignore[attr-defined]
    table = new_table(old, keyed)
    model = Acked(keyed)
    ts = write_batches(old, table, model, 1, 5)
    pid = cluster.pids()["ts-0"]  # type: ignore[attr-defined]
    location = old.master.servers()["ts-0"]
    TableServerProxy(location).arm_failpoint(point)
    writer = Writer(old, table, model, ts + 1000)  # some write reaches ts-0 and stops it there
    stopped.append(pid)
    wait_until(lambda: is_stopped(pid), f"ts-0 to stop at {point}", 60)
    wait_until(lambda: "ts-0" not in routing(old, table).values(), "ts-0's buckets to move", 30)
    new = cluster.client()  # type: ignore[attr-defined]
    write_batches(new, table, model, ts + 5000, 10)
    _continue(pid)
    wait_until(lambda: writer.writes >= 20, "the old client to go on writing", 60)
    writer.stop()
    settle_and_check(cluster, table, model)


def test_a_flush_stopped_before_its_commit_commits_nothing_once_its_server_lost_its_buckets(
    cluster: object, stopped: list[int]
) -> None:
    client = cluster.client()  # type: ignore[attr-defined]
    table = new_table(client, keyed=False)
    model = Acked(keyed=False)
    write_batches(client, table, model, 1, 20)
    pid = cluster.pids()["ts-0"]  # type: ignore[attr-defined]
    zombie = TableServerProxy(client.master.servers()["ts-0"])
    zombie.arm_failpoint(failpoints.BEFORE_FLUSH_COMMIT)
    outcome: list[object] = []
    flushing = threading.Thread(target=lambda: outcome.append(_outcome(lambda: zombie.flush(table, seal=True))))
    flushing.start()
    stopped.append(pid)
    wait_until(lambda: is_stopped(pid), "ts-0 to stop before its flush's commit", 60)
    wait_until(lambda: "ts-0" not in routing(client, table).values(), "ts-0's buckets to move", 30)
    write_batches(cluster.client(), table, model, 100, 10)  # type: ignore[attr-defined]
    _continue(pid)
    flushing.join(120)
    assert len(outcome) == 1 and isinstance(outcome[0], FencedError), outcome
    settle_and_check(cluster, table, model)


def test_the_master_stopped_past_the_timeout_moves_nothing_and_loses_nothing(
    cluster: object, stopped: list[int]
) -> None:
    client = cluster.client()  # type: ignore[attr-defined]
    table = new_table(client)
    model = Acked(keyed=True)
    write_batches(client, table, model, 1, 5)
    placed, before = routing(client, table), lives(client)
    writer = Writer(client, table, model, 100)  # writes go on: they need no master
    pid = cluster.pids()[MASTER]  # type: ignore[attr-defined]
    os.kill(pid, signal.SIGSTOP)
    stopped.append(pid)
    time.sleep(3.5 * TIMEOUT_S)
    _continue(pid)
    fresh = cluster.client()  # type: ignore[attr-defined]
    write_batches(fresh, table, model, 10_000, 10)  # a new client right after: it writes at once
    time.sleep(2 * TIMEOUT_S)  # what a wrong verdict would have done by now
    writer.stop()
    assert routing(client, table) == placed and lives(client) == before
    assert writer.writes > 0
    settle_and_check(cluster, table, model)


def test_the_master_restarted_while_a_table_server_is_stopped(cluster: object, stopped: list[int]) -> None:
    old = cluster.client()  # type: ignore[attr-defined]
    table = new_table(old)
    model = Acked(keyed=True)
    ts = write_batches(old, table, model, 1, 10)
    pids = cluster.pids()  # type: ignore[attr-defined]
    os.kill(pids["ts-0"], signal.SIGSTOP)
    stopped.append(pids["ts-0"])
    os.kill(pids[MASTER], signal.SIGKILL)  # Ray starts it again; it reads its state back
    wait_until(lambda: _moved(old, table, "ts-0"), "the restarted master to move ts-0's buckets", 60)
    ts = write_batches(cluster.client(), table, model, ts, 10)  # type: ignore[attr-defined]
    _continue(pids["ts-0"])
    write_batches(old, table, model, ts, 30)
    settle_and_check(cluster, table, model)


@pytest.mark.parametrize("pause_s", [0.0, 0.3, 0.8])
def test_a_pause_shorter_than_the_timeout_changes_nothing(
    cluster: object, stopped: list[int], pause_s: float
) -> None:
    old = cluster.client()  # type: ignore[attr-defined]
    table = new_table(old)
    model = Acked(keyed=True)
    ts = write_batches(old, table, model, 1, 10)
    placed, before = routing(old, table), lives(old)
    pid = cluster.pids()["ts-0"]  # type: ignore[attr-defined]
    os.kill(pid, signal.SIGSTOP)
    stopped.append(pid)
    during = threading.Thread(target=lambda: write_batches(
        cluster.client(), table, model, 10_000, 10))  # type: ignore[attr-defined]
    during.start()  # a new client connecting during the stop
    time.sleep(pause_s)
    _continue(pid)
    during.join(60)
    write_batches(cluster.client(), table, model, 20_000, 10)  # type: ignore[attr-defined]
    write_batches(old, table, model, ts, 40)
    time.sleep(2 * TIMEOUT_S)
    assert routing(old, table) == placed and lives(old) == before
    settle_and_check(cluster, table, model)


def _moved(client: Client, table: str, server_id: str) -> bool:
    try:
        return server_id not in routing(client, table).values()
    except Exception:  # noqa: BLE001 - the master is restarting
        return False


def _outcome(call: Callable[[], object]) -> object:
    try:
        return call()
    except Exception as e:  # noqa: BLE001 - the test looks at it
        return e
