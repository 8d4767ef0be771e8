"""The table-service pool on real Ray actors: the default policy compacts on its own, a
pool actor SIGKILLed mid-compaction leaves the table readable and the next attempt
succeeds, `memtier compact` shows the task through to its end, and compactions running
while a stream writes into the same file groups lose nothing and fail no writer."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from memtier.cli import main
from memtier.hudi import HudiTable
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ray = pytest.importorskip("ray")

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("name", pa.string()), ("v", pa.float64())])
ROWS = 600_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    import memtier

    root = tmp_path_factory.mktemp("memtier-services")
    running = memtier.start_local(str(root), table_servers=1, config={
        "services.check-interval": "200ms", "services.task-timeout": "5s",
        "tableserver.flush-interval": "200ms", "tableserver.block-max-age": "200ms",
    })
    yield running
    running.shutdown()


def _batch(ids: np.ndarray, ts: int) -> pa.Table:
    return pa.table({"id": ids, "ts": np.full(len(ids), ts), "name": pa.array([f"n{ts}"] * len(ids)),
                     "v": ids.astype(np.float64) * ts}, schema=SCHEMA)


def test_the_default_policy_compacts_a_table_written_through_the_cluster(cluster) -> None:
    client = cluster.client()
    client.create_table("auto", SCHEMA, record_key="id", ordering_field="ts", buckets=2)
    for r in range(6):
        client.write("auto", _batch(np.arange(r * 10, r * 10 + 100), r))
        client.flush("auto")
    expected = rows(client.read("auto"))
    wait_until(lambda: rows(client.read("auto", mode="read_optimized")) == expected,
               "the policy to compact the table", timeout=60)
    wait_until(lambda: client.status()["tables"]["auto"]["services"]["debt"]["log_files"] == 0,
               "status to show no compaction debt left")


def test_a_pool_actor_killed_mid_compaction_leaves_the_table_readable_and_the_next_attempt_succeeds(
    cluster, tmp_path
) -> None:
    client = cluster.client()
    client.create_table("big", SCHEMA, record_key="id", ordering_field="ts", buckets=2)
    client.set_services("big", {"services.compaction-log-files": "100", "services.compaction-log-fraction": "100"})
    ids = np.arange(ROWS)
    for start in range(0, ROWS, 200_000):
        client.write("big", _batch(ids[start:start + 200_000], 1))
    client.flush("big")
    for ts in (2, 3):
        client.write("big", _batch(ids[::10] + ts, ts))  # 10% of the rows updated, in logs
        client.flush("big")
    expected = rows(client.read("big", columns=["id", "ts"]))
    path = os.path.join(cluster.path, "tables", "big")
    task = client.compact("big", wait=False)["tasks"][0]
    inflight = os.path.join(path, ".hoodie", f"{task['instant']}.compaction.inflight")
    completed = os.path.join(path, ".hoodie", f"{task['instant']}.commit")
    wait_until(lambda: os.path.exists(inflight), "the compaction to start", timeout=60)
    pid = cluster.pids()["svc-0"]
    os.kill(pid, signal.SIGKILL)
    assert not os.path.exists(completed), "the compaction finished before the kill: make it bigger"
    assert rows(client.read("big", columns=["id", "ts"])) == expected  # readable meanwhile
    assert rows(hudi_rs_read(path).select(["id", "ts"])) == expected
    wait_until(lambda: client.master.service_task(task["task_id"])["state"] == "completed",
               "the compaction to be run again", timeout=120)
    assert client.master.service_task(task["task_id"])["attempts"] == 2
    assert cluster.pids()["svc-0"] != pid
    assert rows(client.read("big", mode="read_optimized", columns=["id", "ts"])) == expected
    assert rows(hudi_rs_read(path, "read_optimized").select(["id", "ts"])) == expected
    hoodie = os.listdir(os.path.join(path, ".hoodie"))
    assert any(n.endswith(".rollback") for n in hoodie)
    assert HudiTable.open(path).meta.timeline().pending(None) == ()


def test_memtier_compact_shows_the_task_through_to_its_end(cluster, capsys) -> None:
    client = cluster.client()
    client.create_table("cli", SCHEMA, record_key="id", ordering_field="ts", buckets=2)
    client.set_services("cli", {"services.compaction-log-files": "100", "services.compaction-log-fraction": "100"})
    for r in range(3):
        client.write("cli", _batch(np.arange(50), r))
        client.flush("cli")
    assert main(["compact", "cli", "--address", cluster.address]) == 0
    out = capsys.readouterr().out
    assert "compaction" in out and "planned (2 file groups)" in out and "completed" in out
    assert main(["compact", "cli", "--address", cluster.address]) == 0
    assert "nothing to do" in capsys.readouterr().out
    assert main(["status", "--address", cluster.address]) == 0
    assert "Table services:" in capsys.readouterr().out


def test_the_pool_compacts_while_a_stream_writes_into_the_same_file_groups_and_loses_nothing(cluster) -> None:
    client = cluster.client()
    client.create_table("stream", SCHEMA, record_key="id", ordering_field="ts", buckets=2)
    client.set_services("stream", {"services.compaction-log-files": "2"})
    path = os.path.join(cluster.path, "tables", "stream")
    latest: dict[int, int] = {}
    stop, errors = threading.Event(), []

    def write() -> None:
        ts = 0
        try:
            while not stop.is_set():
                ts += 1
                ids = np.arange(ts * 37 % 5000, ts * 37 % 5000 + 2000)  # updates and inserts
                client.write("stream", _batch(ids, ts))
                latest.update(dict.fromkeys(ids.tolist(), ts))
        except BaseException as e:  # reported below
            errors.append(e)

    def compactions() -> int:
        return sum(1 for n in os.listdir(os.path.join(path, ".hoodie")) if n.endswith(".commit"))

    writer = threading.Thread(target=write)
    writer.start()
    try:
        wait_until(lambda: compactions() >= 3 or errors, "three compactions during the stream", timeout=120)
    finally:
        stop.set()
        writer.join(timeout=60)
    assert not errors, errors
    expected = sorted(latest.items())
    assert sorted(zip(*(client.read("stream", columns=["id", "ts"]).column(c).to_pylist() for c in ("id", "ts")),
                      strict=True)) == expected
    client.flush("stream")  # the Hudi files alone (base files compacted meanwhile, logs) hold it all
    files = HudiTable.open(path).read(columns=["id", "ts"])
    assert sorted(zip(*(files.column(c).to_pylist() for c in ("id", "ts")), strict=True)) == expected


def _policies(pid: int) -> set[int]:
    """The scheduling policy of every thread of a process."""
    return {os.sched_getscheduler(int(task.name)) for task in Path(f"/proc/{pid}/task").iterdir()}


def test_pool_actors_run_only_on_cpu_time_nobody_else_wants(cluster) -> None:
    pids = cluster.pids()
    assert _policies(pids["svc-0"]) == {os.SCHED_IDLE}
    assert os.SCHED_IDLE not in _policies(pids["ts-0"])
    assert os.SCHED_IDLE not in _policies(os.getpid())  # clients keep theirs


def test_compact_racing_the_policy_returns_with_every_slice_compacted(cluster, capsys) -> None:
    """The policy (due at one log file, checking every 200 ms) races each manual compact,
    through the client and through `memtier compact`: each returns with the read-optimized
    view holding every row flushed before it was called."""
    client = cluster.client()
    client.create_table("race", SCHEMA, record_key="id", ordering_field="ts", buckets=2)
    client.set_services("race", {"services.compaction-log-files": "1"})
    path = os.path.join(cluster.path, "tables", "race")
    for r in range(8):
        client.write("race", _batch(np.arange(r * 10, r * 10 + 100), r))
        client.flush("race")
        before = rows(client.read("race"))
        if r % 2:
            assert main(["compact", "race", "--address", cluster.address]) == 0
            capsys.readouterr()
        else:
            request = client.compact("race")
            assert request is None or request["state"] == "completed", request
        assert rows(hudi_rs_read(path, "read_optimized")) == before, r
        assert rows(client.read("race", mode="read_optimized")) == before, r
