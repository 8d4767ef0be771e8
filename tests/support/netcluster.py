"""A Ray cluster whose nodes are hosts of a :class:`~tests.support.netns.Network`, and a
memtier cluster on it started by a driver on the head's host.

Every Ray process runs with Ray's own TLS (the test CA's certificate, which names every
host) and token authentication, so nothing on the bridge is in clear text; memtier's
connections use the same certificate through ``cluster.tls.*``. Each node keeps its Ray
files in a temporary directory of its own (``--temp-dir``: nodes on one machine would
otherwise share socket paths, and other Ray runtimes on the machine never find this one).
Ray is told not to declare a node dead for minutes, so a host cut off for a few seconds
comes back with its processes alive, as a host on a flaky network would.

    python -m tests.support.netcluster drive HEAD NODES PATH CONFIG_JSON

is the driver: it connects to the Ray cluster at HEAD, waits for NODES nodes, starts
memtier under PATH with the settings in CONFIG_JSON (table servers pinned to the nodes
with CPUs), prints ``{"address": ..., "servers": {name: host address}}`` and keeps the
cluster until its standard input closes.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from memtier.certificates import CertificateFiles
from tests.support.netns import Host, Network

__all__ = ["GCS_PORT", "RayHosts"]

GCS_PORT = 6379
VENV_BIN = Path(sys.executable).parent
START_SECONDS = 180.0


class RayHosts:
    """A Ray head (no CPUs: the master's host) and worker nodes (one CPU each) on hosts."""

    def __init__(self, network: Network, head: Host, workers: list[Host], pki: CertificateFiles) -> None:
        self.network = network
        self.head = head
        self.workers = workers
        self.env = {
            **os.environ,
            "RAY_USE_TLS": "1", "RAY_TLS_SERVER_CERT": pki.certificate, "RAY_TLS_SERVER_KEY": pki.key,
            "RAY_TLS_CA_CERT": pki.ca, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16),
            "RAY_USAGE_STATS_ENABLED": "0", "RAY_health_check_failure_threshold": "100",
        }
        self._dirs: list[str] = []
        self._start(head, "--head", f"--port={GCS_PORT}", "--num-cpus=0", "--include-dashboard=false")
        _wait_for_port(head.address, GCS_PORT)
        for worker in workers:
            self._start(worker, f"--address={head.address}:{GCS_PORT}", "--num-cpus=1")

    def _start(self, host: Host, *options: str) -> None:
        temp = f"/tmp/{host.namespace}"  # short: Ray's socket paths must fit 107 bytes
        self._dirs.append(temp)
        with open(f"{temp}.log", "w") as log:  # the process keeps its own descriptor of it
            self.network.run(host, [str(VENV_BIN / "ray"), "start", "--block", f"--node-ip-address={host.address}",
                                    f"--temp-dir={temp}", "--disable-usage-stats", *options],
                             env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def drive(self, path: str, config: dict[str, str]) -> tuple[subprocess.Popen[str], dict[str, Any]]:
        """Start memtier (a driver on the head's host); the driver and what it printed."""
        argv = [sys.executable, "-m", "tests.support.netcluster", "drive", self.head.address,
                str(1 + len(self.workers)), path, json.dumps(config)]
        driver = self.network.run(self.head, argv, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, cwd=Path(__file__).resolve().parents[2])
        assert driver.stdout is not None
        line = driver.stdout.readline()
        if not line:
            raise AssertionError(f"the memtier driver ended without starting a cluster (exit {driver.wait()})")
        return driver, json.loads(line)

    def close(self) -> None:
        """Remove the nodes' Ray files (their processes die with the network)."""
        for temp in self._dirs:
            shutil.rmtree(temp, ignore_errors=True)
            Path(f"{temp}.log").unlink(missing_ok=True)


def _wait_for_port(host: str, port: int) -> None:
    deadline = time.monotonic() + START_SECONDS
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(f"the Ray head at {host}:{port} did not start") from None
            time.sleep(0.2)


def drive(head: str, nodes: int, path: str, config: dict[str, str]) -> None:
    import ray

    import memtier

    ray.init(address=f"{head}:{GCS_PORT}", _node_ip_address=head, namespace="memtier", log_to_driver=False,
             configure_logging=False)
    deadline = time.monotonic() + START_SECONDS
    while len([n for n in ray.nodes() if n["Alive"]]) < nodes:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(ray.nodes())} of {nodes} Ray nodes joined")
        time.sleep(0.2)
    cluster = memtier.start(path, table_servers=nodes - 1, pin_to_nodes=True, config=config)
    addresses = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    servers = {name: addresses[ray.get(actor.node_id.remote())] for name, actor in cluster.table_servers.items()}
    print(json.dumps({"address": cluster.address, "servers": servers}), flush=True)
    sys.stdin.read()
    cluster.shutdown()


if __name__ == "__main__":
    if sys.argv[1:2] != ["drive"]:
        raise SystemExit("usage: python -m tests.support.netcluster drive HEAD NODES PATH CONFIG_JSON")
    drive(sys.argv[2], int(sys.argv[3]), sys.argv[4], json.loads(sys.argv[5]))
