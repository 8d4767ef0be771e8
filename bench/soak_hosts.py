"""Hosts for the chaos soak: a Ray cluster on this machine whose nodes are processes the
soak owns, so that one can vanish at once.

Each node is a ``ray start --block`` process (its raylet, its agents and every worker
process the raylet starts, actors included, descend from it), with its own temporary
directory and ports. The head holds the soak's driver and whatever Ray puts
there; a worker node is a "host": :meth:`RayHosts.remove` SIGKILLs every process of it
at once, as a machine that lost power, and :meth:`RayHosts.add` starts another in
its place. This is not a host in a network namespace of its own (tests/integration/
test_multihost.py does that): the nodes share this machine's address and file systems.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RayHosts", "RayNode"]

RAY = str(Path(sys.executable).parent / "ray")
START_SECONDS = 180.0
_STARTED = "Ray runtime started"


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports free now (held open together, so none is given twice)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in sockets]


@dataclass
class RayNode:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def pids(self) -> list[int]:
        """Every process of this node: ``ray start`` and what descends from it (Ray's
        worker processes get process groups of their own)."""
        return _descendants(self.process.pid)


def _descendants(root: int) -> list[int]:
    """``root`` and every process that descends from it (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root] if Path(f"/proc/{root}").exists() else []
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


class RayHosts:
    """A head and ``workers`` worker nodes (one CPU each), started and waited for."""

    def __init__(self, base: Path, workers: int, head_cpus: int = 2) -> None:
        self._temp = Path(f"/tmp/msoak-{secrets.token_hex(3)}")  # short: Ray's socket paths must fit 107 bytes
        self._logs = base
        self.nodes: list[RayNode] = []
        self._count = 0
        # token authentication, one token for every node and for this process (whose
        # ray.init, in memtier.start, then joins)
        os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)})
        port, client, dashboard = _free_ports(3)
        self.head = self._start("head", "--head", f"--port={port}", f"--num-cpus={head_cpus}",
                                "--include-dashboard=false", f"--ray-client-server-port={client}",
                                f"--dashboard-port={dashboard}")
        output = re.sub(r"\x1b\[[0-9;]*m", "", self.head.log.read_text(errors="replace"))
        found = re.search(r"Local node IP: ([0-9.]+)", output)
        assert found, f"no node IP in the Ray head's output: {self.head.log}"
        self.address = f"{found.group(1)}:{port}"
        try:
            for _ in range(workers):
                self.add()
        except BaseException:
            self.close()
            raise

    def _start(self, name: str, *options: str) -> RayNode:
        log = self._logs / f"ray-{name}.log"
        listen, grpc, runtime_env, metrics = _free_ports(4)
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [RAY, "start", "--block", f"--temp-dir={self._temp / name}", "--disable-usage-stats",
                 f"--dashboard-agent-listen-port={listen}", f"--dashboard-agent-grpc-port={grpc}",
                 f"--runtime-env-agent-port={runtime_env}", f"--metrics-export-port={metrics}", *options],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        node = RayNode(name, process, log)
        try:
            self._wait(node)
        except BaseException:
            os.killpg(process.pid, signal.SIGKILL)
            raise
        return node

    def _wait(self, node: RayNode) -> None:
        deadline = time.monotonic() + START_SECONDS
        while _STARTED not in node.log.read_text(errors="replace"):
            if node.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Ray node {node.name} did not start:\n"
                                   f"{node.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)

    def add(self) -> RayNode:
        """One more worker node ("host")."""
        self._count += 1
        node = self._start(f"host-{self._count}", f"--address={self.address}", "--num-cpus=1")
        self.nodes.append(node)
        return node

    def hosting(self, pid: int) -> RayNode | None:
        """The worker node process ``pid`` runs on, if any."""
        return next((n for n in self.nodes if pid in n.pids()), None)

    def remove(self, node: RayNode) -> list[int]:
        """SIGKILL every process of ``node``; the pids killed."""
        pids = node.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        node.process.wait(60)
        self.nodes.remove(node)
        return pids

    def close(self) -> None:
        """Kill every node, the head last; keep the actors' output beside the nodes' logs
        (``actors/<node>/``: what a fault did, to read after); remove the nodes' files."""
        for node in [*self.nodes, self.head]:
            for pid in node.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            node.process.wait(60)
        for output in self._temp.glob("*/session_*/logs/worker-*.err"):
            if output.stat().st_size:
                kept = self._logs / "actors" / output.parents[2].name
                kept.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(output, kept / output.name)
        shutil.rmtree(self._temp, ignore_errors=True)
