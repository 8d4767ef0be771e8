"""The write tier on real Ray actors: the scenario suite of the in-process tests, and
crash tests that SIGKILL a table server's or the master's worker process during a
sustained write stream."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from memtier.hudi.tablemeta import TableMeta
from memtier.io import join, open_fileio
from memtier.master.service import MasterProxy
from memtier.tableserver.service import TableServerProxy
from tests.support.hudirs import hudi_rs_read
from tests.support.scenario import SCHEMA, random_ops, run_scenario
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ray = pytest.importorskip("ray")

SERVERS = 2
#: cluster.writer-lease of this module's cluster: short, for the killed backfill's driver.
LEASE_S = 10

#: A backfill's driver (the steps Spark runs, driven directly): begins, writes its files,
#: says so, and waits to be killed before it commits.
BACKFILL_DRIVER = """
import sys, time
import pyarrow as pa
from memtier.spark.backfill import Backfill
from memtier.spark.options import BACKFILL, SourceOptions
from tests.support.scenario import SCHEMA

address, table = sys.argv[1:3]
backfill = Backfill(SourceOptions.parse({"table": table, "address": address}, BACKFILL, "batch write"), SCHEMA)
backfill.write(iter(pa.table({"id": [1, 2], "ts": [9, 9], "p": ["p0", "p1"], "v": ["b", "b"]},
                             schema=SCHEMA).to_batches()))
print(backfill.instant, flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def wal_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cluster's WAL, apart from its tables (cluster.wal-path): every test here runs so."""
    return tmp_path_factory.mktemp("memtier-ray-wal")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, wal_dir: Path) -> Iterator[object]:
    import memtier

    root = tmp_path_factory.mktemp("memtier-ray")
    running = memtier.start_local(str(root), table_servers=SERVERS, config={"cluster.wal-path": str(wal_dir),
                                                                           "cluster.writer-lease": f"{LEASE_S}s"})
    yield running
    running.shutdown()


def _kill(cluster: object, name: str) -> None:
    """SIGKILL an actor's worker process and wait until Ray has started it again."""
    before = cluster.pids()[name]  # type: ignore[attr-defined]
    os.kill(before, signal.SIGKILL)
    wait_until(lambda: cluster.pids()[name] != before, f"{name} to restart")  # type: ignore[attr-defined]


def _kill_mid_stream(cluster: object, victim: str, stream: Callable[[threading.Event, list[BaseException]], None],
                     progress: Callable[[], int], n: int) -> None:
    """Run ``stream(stop, errors)`` on a thread; once ``progress()`` reached ``n``, SIGKILL
    ``victim`` (waiting for Ray to start it again) and let the stream make ``n`` more;
    then stop it: no write may have failed."""
    stop, errors = threading.Event(), []
    writer = threading.Thread(target=stream, args=(stop, errors))
    writer.start()
    wait_until(lambda: progress() >= n or errors, "the stream to get going")
    _kill(cluster, victim)
    count = progress()
    wait_until(lambda: progress() >= count + n or errors, f"writes to go on after {victim} restarted")
    stop.set()
    writer.join(timeout=120)
    assert not errors, errors


class RayHarness:
    def __init__(self, cluster: object) -> None:
        self.cluster = cluster
        self.client = cluster.client()  # type: ignore[attr-defined]
        self.servers = SERVERS

    def evict(self) -> None:
        master = MasterProxy(self.cluster.address)  # type: ignore[attr-defined]
        for location in master.servers().values():
            TableServerProxy(location).evict()

    def restart(self, index: int) -> None:
        _kill(self.cluster, f"ts-{index}")


def test_table_server_processes_run_without_transparent_huge_pages(cluster: object) -> None:
    pids = cluster.pids()  # type: ignore[attr-defined]
    for name in (f"ts-{i}" for i in range(SERVERS)):
        status = Path(f"/proc/{pids[name]}/status").read_text()
        assert "THP_enabled:\t0" in status, name


def test_the_wal_lives_where_cluster_wal_path_says_and_goes_with_a_purged_table(
    cluster: object, wal_dir: Path
) -> None:
    client = cluster.client()  # type: ignore[attr-defined]
    client.create_table("walpath", SCHEMA, record_key="id", ordering_field="ts", buckets=2)
    client.write("walpath", pa.table({"id": [1, 2], "ts": [1, 1], "p": ["a", "b"], "v": ["x", "y"]},
                                     schema=SCHEMA))
    assert list((wal_dir / "walpath").rglob("*.stream")), "the table's WAL segments are under cluster.wal-path"
    root = Path(cluster.path)  # type: ignore[attr-defined]
    assert not (root / "_memtier" / "wal").exists()
    client.drop_table("walpath", purge=True)
    assert not (wal_dir / "walpath").exists()


def test_table_server_processes_start_with_the_allocator_settings(cluster: object) -> None:
    """Arrow's jemalloc and glibc's malloc settings that return freed memory (read at
    process start, so they must be in the actor's environment)."""
    from memtier.tableserver.memory import PROCESS_ENV

    pids = cluster.pids()  # type: ignore[attr-defined]
    for name in (f"ts-{i}" for i in range(SERVERS)):
        environ = Path(f"/proc/{pids[name]}/environ").read_bytes().split(b"\0")
        assert {f"{k}={v}".encode() for k, v in PROCESS_ENV.items()} <= set(environ), name


def _cpus_allowed(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(line.split(":\t")[1] for line in status.splitlines() if line.startswith("Cpus_allowed_list"))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) != 2, reason="checks the 2-CPU default placement")
def test_the_pool_and_flush_workers_run_on_one_core_and_table_servers_on_the_other(cluster: object) -> None:
    """The default placement on a 2-core machine (cluster.service-cpus=auto): the pool
    actor and each flush worker on CPU 1, table servers on CPU 0; `memtier status` says so."""
    from memtier.cli_format import status_report

    client = cluster.client()  # type: ignore[attr-defined]
    table = f"placed_{uuid.uuid4().hex[:6]}"
    client.create_table(table, SCHEMA, record_key="id", ordering_field="ts", partition_fields="p", buckets=4)
    keys = list(range(200))  # every bucket, so both servers flush
    client.write(table, pa.table({"id": keys, "ts": [1] * 200, "p": [f"p{k % 2}" for k in keys],
                                  "v": ["a"] * 200}, schema=SCHEMA))
    client.flush(table)
    pids = cluster.pids()  # type: ignore[attr-defined]
    assert _cpus_allowed(pids["svc-0"]) == "1"
    for name in (f"ts-{i}" for i in range(SERVERS)):
        assert _cpus_allowed(pids[name]) == "0", name
        worker = cluster.flush_worker_pid(name)  # type: ignore[attr-defined]
        assert worker is not None and _cpus_allowed(worker) == "1", name
    wait_until(lambda: all(s.get("flush_cpus") for s in client.status()["servers"].values()),
               "the servers to report their flush workers' CPUs")
    assert client.status()["pool"] == {"svc-0": "1"}
    lines = status_report(cluster.address, client.status()).splitlines()  # type: ignore[attr-defined]
    for name in (f"ts-{i}" for i in range(SERVERS)):
        assert next(line for line in lines if line.strip().startswith(name)).rstrip().endswith("0 (1)")


@pytest.mark.parametrize(("seed", "kind"), [(11, "keyed"), (12, "keyed"), (13, "deletes"), (14, "keyless")])
def test_random_scenarios_on_ray_actors(cluster: object, seed: int, kind: str) -> None:
    table = f"scenario_{seed}_{uuid.uuid4().hex[:6]}"
    path = join(cluster.path, "tables", table)  # type: ignore[attr-defined]
    ops = random_ops(random.Random(seed), 25, SERVERS, deletes=kind == "deletes")
    run_scenario(RayHarness(cluster), table, path, ops, keyless=kind == "keyless")


def _stream(client: object, table: str, stop: threading.Event, acked: list[int], errors: list[BaseException],
            *, in_transactions: bool = False) -> None:
    """Write batches of fresh keys until stopped (each its own transaction, begun and
    committed at the master, if ``in_transactions``), recording each acknowledged key."""
    next_key = 0
    try:
        while not stop.is_set():
            keys = list(range(next_key, next_key + 50))
            batch = pa.table({"id": keys, "ts": [1] * 50, "p": [f"p{k % 2}" for k in keys],
                              "v": [f"v{k}" for k in keys]}, schema=SCHEMA)
            if in_transactions:
                with client.transaction(table) as txn:  # type: ignore[attr-defined]
                    txn.write(batch)
            else:
                client.write(table, batch)  # type: ignore[attr-defined]
            acked.extend(keys)
            next_key += 50
    except BaseException as e:  # surfaced by the test
        errors.append(e)


def _stream_with_deletes(client: object, table: str, stop: threading.Event, live: dict[int, str],
                         deleted: set[int], errors: list[BaseException]) -> None:
    """Each write upserts 60 fresh keys and deletes (flagged rows) 20 acknowledged ones,
    spread over every file group; ``live`` and ``deleted`` follow the acknowledgements."""
    next_key, rng = 0, random.Random(5)
    try:
        while not stop.is_set():
            fresh = list(range(next_key, next_key + 60))
            gone = rng.sample(sorted(live), min(20, len(live)))
            keys = fresh + gone
            batch = pa.table({
                "id": keys, "ts": [1] * len(fresh) + [2] * len(gone), "p": [f"p{k % 2}" for k in keys],
                "v": [f"v{k}" for k in fresh] + [None] * len(gone),
                "_hoodie_is_deleted": [False] * len(fresh) + [True] * len(gone),
            })
            client.write(table, batch)  # type: ignore[attr-defined]
            live.update({k: f"v{k}" for k in fresh})
            for k in gone:
                live.pop(k)
            deleted.update(gone)
            next_key += 60
    except BaseException as e:  # surfaced by the test
        errors.append(e)


def test_sigkill_during_upserts_and_deletes_to_many_file_groups(cluster: object) -> None:
    """A table server is SIGKILLed while a stream upserts and deletes across 32 file
    groups: every acknowledged row is there once, every acknowledged delete holds, in
    memtier's reads and in the Hudi table hudi-rs reads after the flush."""
    client = cluster.client()  # type: ignore[attr-defined]
    table = f"crash_deletes_{uuid.uuid4().hex[:6]}"
    path = join(cluster.path, "tables", table)  # type: ignore[attr-defined]
    client.create_table(table, SCHEMA, record_key="id", ordering_field="ts", partition_fields="p",
                        buckets=16, path=path)
    live, deleted = {}, set()
    _kill_mid_stream(cluster, "ts-1", lambda stop, errors: _stream_with_deletes(client, table, stop, live, deleted,
                                                                               errors), lambda: len(deleted), 400)

    def check(found: pa.Table) -> None:
        ids = found.column("id").to_pylist()
        assert len(ids) == len(set(ids)), "a key appears twice"
        assert set(ids) == set(live), (
            f"{len(set(live) - set(ids))} acknowledged rows lost, {len(set(ids) & deleted)} deletes undone"
        )
        assert dict(zip(ids, found.column("v").to_pylist(), strict=True)) == live

    check(client.read(table, columns=["id", "v"]))
    client.flush(table)
    check(hudi_rs_read(path))


@pytest.mark.parametrize("victim", ["ts-0", "master"])
def test_sigkill_during_a_write_stream_loses_no_acknowledged_row(
    cluster: object, victim: str, tmp_path: Path
) -> None:
    client = cluster.client()  # type: ignore[attr-defined]
    table = f"crash_{victim.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
    path = join(cluster.path, "tables", table)  # type: ignore[attr-defined]
    client.create_table(table, SCHEMA, record_key="id", ordering_field="ts", partition_fields="p",
                        buckets=4, path=path)
    stop, acked, errors = threading.Event(), [], []
    writer = threading.Thread(target=_stream, args=(client, table, stop, acked, errors))
    writer.start()
    wait_until(lambda: len(acked) >= 2000 or errors, "the stream to get going")
    name = "memtier-master" if victim == "master" else victim
    _kill(cluster, name)
    assert client.describe(table)["name"] == table  # control calls wait out the restart too
    count = len(acked)
    wait_until(lambda: len(acked) >= count + 2000 or errors, "writes to go on after the restart")
    stop.set()
    writer.join(timeout=120)
    assert not errors, errors
    keys = client.read(table, columns=["id"]).column("id").to_pylist()
    assert len(keys) == len(set(keys)), "a key appears twice"
    assert set(acked) <= set(keys), f"{len(set(acked) - set(keys))} acknowledged rows lost"
    client.flush(table)
    flushed = hudi_rs_read(path).column("id").to_pylist()
    assert sorted(flushed) == sorted(set(flushed)) and set(acked) <= set(flushed)


def test_transactions_begin_and_commit_through_a_restart_of_the_master(cluster: object) -> None:
    """A writer committing one transaction after another while the master is SIGKILLed:
    beginning, committing (and aborting) wait out its restart as writes do (the calls are
    idempotent), so none fails, and every committed row is there for committed readers."""
    client = cluster.client()  # type: ignore[attr-defined]
    table = f"txn_master_{uuid.uuid4().hex[:6]}"
    client.create_table(table, SCHEMA, record_key="id", ordering_field="ts", partition_fields="p", buckets=2,
                        path=join(cluster.path, "tables", table))  # type: ignore[attr-defined]
    acked: list[int] = []
    _kill_mid_stream(cluster, "memtier-master", lambda stop, errors: _stream(client, table, stop, acked, errors,
                                                                           in_transactions=True), lambda: len(acked), 500)
    keys = client.read(table, "committed", columns=["id"]).column("id").to_pylist()
    assert sorted(keys) == sorted(set(acked))


def test_the_instant_of_a_backfill_whose_driver_was_killed_is_rolled_back_after_the_writer_lease(
    cluster: object,
) -> None:
    """A backfill's driver renews the lease on its deltacommit while it runs (it stays
    pending past the lease); SIGKILLed before its commit, the master rolls the instant
    back once the lease lapses, deleting what it wrote, and the table takes flushes on."""
    client = cluster.client()  # type: ignore[attr-defined]
    table = f"backfill_lease_{uuid.uuid4().hex[:6]}"
    path = join(cluster.path, "tables", table)  # type: ignore[attr-defined]
    client.create_table(table, SCHEMA, record_key="id", ordering_field="ts", partition_fields="p", buckets=2,
                        path=path)
    meta = TableMeta.load(open_fileio(path), path)
    driver = subprocess.Popen([sys.executable, "-c", BACKFILL_DRIVER, cluster.address, table],  # type: ignore[attr-defined]
                              stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        assert driver.stdout is not None
        instant = driver.stdout.readline().strip()
        assert instant, f"the backfill's driver exited with {driver.wait()}"
        pending = lambda: {i.timestamp for i in meta.timeline().pending(None)}  # noqa: E731
        time.sleep(LEASE_S + 3)  # past the lease: renewed, so still pending
        assert instant in pending()
    finally:
        driver.kill()
        driver.wait()
    rolled_back = lambda: instant not in pending() and any(  # noqa: E731
        i.action == "rollback" for i in meta.timeline().completed(None))  # (its instant goes before the rollback completes)
    wait_until(rolled_back, "the killed backfill's instant to be rolled back", timeout=60)
    client.write(table, pa.table({"id": [1, 3], "ts": [1, 1], "p": ["p1", "p1"], "v": ["a", "a"]}, schema=SCHEMA))
    client.flush(table)
    assert sorted(hudi_rs_read(path).column("id").to_pylist()) == [1, 3]  # nothing of the backfill


def test_a_table_server_started_before_its_master_answers_registers_once_it_does(
    cluster: object, tmp_path: Path
) -> None:
    """A host holding the master and a table server gone: Ray starts both again elsewhere,
    and the server's constructor may run before the master listens (found by the chaos
    soak: the server's start failed on the unreachable master, and Ray never restarts an
    actor whose constructor raised, so the cluster lost that server for good)."""
    import socket

    from memtier.cluster import MasterShell, TableServerShell
    from memtier.master.service import MasterProxy

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    location = f"grpc://127.0.0.1:{port}"  # nothing listens there yet
    server = ray.remote(TableServerShell).options(num_cpus=0).remote(
        "ts-early", location, str(tmp_path / "wal"), {}, {}, None)
    assert ray.get(server.location.remote(), timeout=120)  # started, not failed
    master = ray.remote(MasterShell).options(num_cpus=0).remote(str(tmp_path / "data"), port, {}, None, {}, {})
    try:
        assert ray.get(master.location.remote(), timeout=120) == location
        wait_until(lambda: "ts-early" in MasterProxy(location).servers(), "the early server to register")
    finally:
        ray.kill(server, no_restart=True)
        ray.kill(master, no_restart=True)


def test_a_table_service_actor_started_before_its_master_answers_joins_once_it_does(
    cluster: object, tmp_path: Path
) -> None:
    """The same for the table-service pool (found by the chaos soak: after a host holding
    the master and a pool actor was gone, the pool's constructor failed on the unreachable
    master and the pool was lost for good): it tells the master it started once it answers."""
    import socket

    from memtier.cluster import MasterShell, TableServiceShell
    from memtier.master.service import MasterProxy

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    location = f"grpc://127.0.0.1:{port}"  # nothing listens there yet
    pool = ray.remote(TableServiceShell).options(num_cpus=0).remote("svc-early", location, {})
    assert ray.get(pool.pid.remote(), timeout=120)  # started, not failed
    master = ray.remote(MasterShell).options(num_cpus=0).remote(str(tmp_path / "data"), port, {}, None, {}, {})
    try:
        assert ray.get(master.location.remote(), timeout=120) == location
        wait_until(lambda: "svc-early" in str(MasterProxy(location).status()["pool"]), "the early pool actor to join")
    finally:
        ray.kill(pool, no_restart=True)
        ray.kill(master, no_restart=True)
