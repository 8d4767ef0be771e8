"""memtier on more than one host, for real: Ray nodes in separate Linux network namespaces
on this machine (veth pairs to a bridge, an address each), every connection over TLS.

Host ``h`` runs the Ray head and the master, ``a`` and ``b`` a Ray node and a table server
each (pinned), ``c`` the client, a process writing an append-only table (each row must be
read exactly once). The WAL lives in a directory every host reaches. In order:

1. the cluster is where it should be, and rows written from ``c`` are read once;
2. ``c``'s and ``a``'s links slow (a 2 Mbit/s token bucket) and lossy (3% of packets
   dropped each way) slow the writes and lose or double none (this machine's kernel has
   no ``tc netem``);
3. ``a`` cut off while ``c`` writes: its buckets move to ``b`` with nothing lost, and the
   table server on ``a``, alive and still holding its buckets, refuses a write to one of
   them from its own host (fenced); reconnected, it rejoins;
4. ``b`` removed (every process on it SIGKILLed) while ``c`` writes: its buckets move to
   ``a`` with nothing lost, and every table written so far reads exactly as acknowledged.

Needs root (skipped otherwise). Rates under each condition are printed, never asserted.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from memtier.certificates import CertificateFiles, make_certificates
from memtier.hudi.keys import bucket_ids
from tests.support.acked import SCHEMA, Acked, batch
from tests.support.netcluster import RayHosts
from tests.support.netns import Host, Network, unavailable
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]
pytest.importorskip("ray")

TOKEN = "multihost-test-token"
ROWS = 100
BUCKETS = 4
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Cluster:
    network: Network
    hosts: dict[str, Host]
    address: str
    servers: dict[str, str]  # table server -> its host's address
    pki: CertificateFiles
    written: dict[str, Acked] = field(default_factory=dict)
    next_batch: int = 0

    def client(self) -> Any:
        import memtier

        return memtier.connect(self.address, token=TOKEN, tls_ca=self.pki.ca)

    def server_on(self, host: str) -> str:
        return next(name for name, address in self.servers.items() if address == self.hosts[host].address)

    def routing(self, table: str) -> dict[int, str]:
        return {int(b): s for b, s in self.client().describe(table)["routing"].items()}

    def start_writer(self, table: str, seconds: float) -> subprocess.Popen[str]:
        """The client on host ``c``: writes ``table`` for ``seconds`` (see tests.support.netclient)."""
        first, self.next_batch = self.next_batch, self.next_batch + 1_000_000
        argv = [sys.executable, "-m", "tests.support.netclient", "write", self.address, TOKEN, self.pki.ca, table,
                str(first), str(seconds), str(ROWS)]
        return self.network.run(self.hosts["c"], argv, stdout=subprocess.PIPE, text=True, cwd=REPO)

    def finish_writer(self, writer: subprocess.Popen[str], table: str) -> list[float]:
        """Wait for the writer; record what it had acknowledged; its ack latencies (ms)."""
        out, _ = writer.communicate(timeout=300)
        acked = self.written.setdefault(table, Acked(keyed=False))
        latencies = []
        for line in out.splitlines():
            kind, index, *rest = line.split(" ", 2)
            assert kind != "UNKNOWN", f"a write was never acknowledged: {out[-2000:]}"
            if kind == "ACK":
                i = int(index)
                acked.acknowledged(batch(list(range(i * ROWS, (i + 1) * ROWS)), i))
                latencies.append(float(rest[0]))
        assert latencies, f"the writer on host c acknowledged nothing: {out[-2000:]}"
        return latencies

    def under_way(self, table: str) -> None:
        """Wait until a writer just started has had writes acknowledged (rows readable)."""
        before = self.client().read(table, columns=["id"]).num_rows
        wait_until(lambda: self.client().read(table, columns=["id"]).num_rows >= before + 2 * ROWS,
                   f"the writer on host c to write {table}")

    def check(self, table: str) -> None:
        self.written[table].check(self.client().read(table, columns=SCHEMA.names), f"{table} read from host h")


def rate(latencies: list[float], seconds: float) -> str:
    ordered = sorted(latencies)
    return (f"{len(latencies) * ROWS / seconds:,.0f} rows/s, ack p50 {ordered[len(ordered) // 2]:.1f} ms, "
            f"p99 {ordered[int(len(ordered) * 0.99)]:.1f} ms, max {ordered[-1]:,.0f} ms")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    with Network() as network:
        hosts = {name: network.add_host(name) for name in "habc"}
        pki = make_certificates(str(tmp_path_factory.mktemp("multihost-pki")),
                                [h.address for h in hosts.values()])
        ray_hosts = RayHosts(network, hosts["h"], [hosts["a"], hosts["b"]], pki)
        try:
            driver, started = ray_hosts.drive(str(tmp_path_factory.mktemp("multihost")), {
                "cluster.host": "0.0.0.0", "cluster.token": TOKEN, **pki.settings(),
                "cluster.heartbeat-timeout": "3s", "services.workers": "0",
            })
            yield Cluster(network, hosts, started["address"], started["servers"], pki)
            assert driver.stdin is not None
            driver.stdin.close()
            driver.wait(timeout=60)
        finally:
            network.close()
            ray_hosts.close()


def test_table_servers_live_on_their_hosts_and_a_client_on_a_third_writes_over_tls(cluster: Cluster) -> None:
    assert cluster.address.startswith(f"grpc+tls://{cluster.hosts['h'].address}:")
    assert sorted(cluster.servers.values()) == sorted([cluster.hosts["a"].address, cluster.hosts["b"].address])
    client = cluster.client()
    for name, server in client.status()["servers"].items():
        assert server["location"].startswith(f"grpc+tls://{cluster.servers[name]}:")
    client.create_table("events", SCHEMA, record_key=None, buckets=BUCKETS)
    assert set(cluster.routing("events").values()) == set(cluster.servers)
    latencies = cluster.finish_writer(cluster.start_writer("events", 8), "events")
    print(f"\nclient on host c, clean links: {rate(latencies, 8)}")
    cluster.check("events")


def test_a_slow_lossy_link_slows_writes_without_losing_or_doubling_any(cluster: Cluster) -> None:
    impaired = [cluster.hosts["c"], cluster.hosts["a"]]
    for host in impaired:
        cluster.network.impair(host, "2mbit", 3)
    try:
        latencies = cluster.finish_writer(cluster.start_writer("events", 8), "events")
    finally:
        for host in impaired:
            cluster.network.repair(host)
    print(f"\nhosts c and a at 2 Mbit/s, losing 3% of packets each way: {rate(latencies, 8)}")
    cluster.check("events")


def test_a_host_cut_off_and_reconnected_acknowledges_nothing_for_its_moved_buckets(cluster: Cluster) -> None:
    client = cluster.client()
    client.create_table("fenced", SCHEMA, record_key="id", ordering_field="ts", buckets=BUCKETS)
    on_a = cluster.server_on("a")
    location = client.status()["servers"][on_a]["location"]
    routing = cluster.routing("fenced")
    keys = [k for k, b in zip(range(1000), bucket_ids(batch(list(range(1000)), 0), ["id"], BUCKETS), strict=True)
            if routing[int(b)] == on_a][:20]
    assert keys, f"{on_a} owns no bucket of 'fenced': {routing}"
    writer = cluster.start_writer("events", 25)
    cluster.under_way("events")
    cluster.network.cut(cluster.hosts["a"])
    try:
        wait_until(lambda: set(cluster.routing("fenced").values()) == {cluster.server_on("b")},
                   "the master to move the cut-off host's buckets", timeout=120)
        argv = [sys.executable, "-m", "tests.support.netclient", "probe", location, TOKEN, cluster.pki.ca, "fenced",
                ",".join(map(str, keys))]
        probe = cluster.network.run(cluster.hosts["a"], argv, stdout=subprocess.PIPE, text=True, cwd=REPO)
        answer = probe.communicate(timeout=60)[0].strip()
    finally:
        cluster.network.reconnect(cluster.hosts["a"])
    assert answer.startswith("REFUSED FencedError"), answer
    latencies = cluster.finish_writer(writer, "events")
    print(f"\nhost a cut off for a while during 25 s of writes from host c: {rate(latencies, 25)}")
    wait_until(lambda: on_a in client.status()["servers"], "the reconnected table server to rejoin", timeout=60)
    cluster.check("events")
    got = client.read("fenced")
    assert got.num_rows == 0, f"the fenced server's refused write is visible: {got.to_pylist()[:3]}"


def test_removing_a_host_moves_its_buckets_to_the_survivor_with_nothing_lost(cluster: Cluster) -> None:
    client = cluster.client()
    on_a, on_b = cluster.server_on("a"), cluster.server_on("b")
    wait_until(lambda: on_b in set(cluster.routing("events").values()), f"{on_b} to own buckets again", timeout=90)
    writer = cluster.start_writer("events", 20)
    cluster.under_way("events")
    killed = cluster.network.remove(cluster.hosts["b"])
    assert killed, "nothing ran on host b"
    wait_until(lambda: set(cluster.routing("events").values()) == {on_a}, "the survivor to take every bucket",
               timeout=90)
    latencies = cluster.finish_writer(writer, "events")
    print(f"\nhost b removed during 20 s of writes from host c: {rate(latencies, 20)}")
    cluster.check("events")
    assert client.read("fenced").num_rows == 0
