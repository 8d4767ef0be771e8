"""Hosts on one machine: Linux network namespaces joined by veth pairs to a bridge.

Each :class:`Host` is a namespace with its own loopback, one interface (``eth0``) and an
address on a private /24 that only this network uses (its third octet chosen at random, so
two networks on one machine do not meet); the bridge in the root namespace holds ``.1``,
so this process reaches every host. A host can be cut off and reconnected (its link to the
bridge set down and up), its link made slow and lossy (a token bucket and random drops,
both ways), and removed (every process in its namespace SIGKILLed). :meth:`Network.close` kills every
process left in the namespaces (only the processes started there, by this network's
user) and deletes the namespaces, the veth pairs and the bridge. Needs root, iproute2 and
nftables.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
from dataclasses import dataclass
from typing import Any

__all__ = ["Host", "Network", "unavailable"]


def unavailable() -> str | None:
    """Why this machine cannot make a network of namespaces, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    missing = [tool for tool in ("ip", "tc", "nft") if shutil.which(tool) is None]
    if missing:
        return f"making hosts needs {', '.join(missing)} (Debian's iproute2 and nftables; scripts/setup.sh installs them)"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _in(host: Host, *argv: str, check: bool = True) -> None:
    """Run ``argv`` in ``host``'s namespace."""
    subprocess.run(["ip", "netns", "exec", host.namespace, *argv], check=check, capture_output=True, text=True)


@dataclass(frozen=True)
class Host:
    """One namespace: its name, its address, and its veth's end on the bridge."""

    name: str
    namespace: str
    address: str
    link: str  # the root namespace's end of its veth pair, on the bridge


class Network:
    """A bridge and the hosts on it; a context manager that tears it all down."""

    def __init__(self, prefix: str = "mt") -> None:
        self._tag = f"{prefix}{random.randrange(16**4):04x}"
        self.subnet = f"10.{random.randrange(100, 250)}.{random.randrange(1, 250)}"
        self.bridge = f"{self._tag}br"
        self.gateway = f"{self.subnet}.1"
        self.hosts: dict[str, Host] = {}
        self.processes: list[subprocess.Popen[Any]] = []
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def add_host(self, name: str) -> Host:
        """A new host ``name`` (a letter or two), with the next address of the subnet."""
        host = Host(name, f"{self._tag}-{name}", f"{self.subnet}.{10 + len(self.hosts)}", f"{self._tag}{name}")
        _ip("netns", "add", host.namespace)
        self.hosts[name] = host
        _ip("link", "add", host.link, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
        _ip("link", "set", host.link, "master", self.bridge, "up")
        inside = ("netns", "exec", host.namespace, "ip")
        _ip(*inside, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip(*inside, "link", "set", "eth0", "up")
        _ip(*inside, "link", "set", "lo", "up")
        _ip(*inside, "route", "add", "default", "via", self.gateway)
        return host

    def run(self, host: Host, argv: list[str], **popen: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` on ``host`` (in its namespace)."""
        process = subprocess.Popen(["ip", "netns", "exec", host.namespace, *argv], **popen)
        self.processes.append(process)
        return process

    def pids(self, host: Host) -> list[int]:
        """Every process in ``host``'s namespace."""
        out = subprocess.run(["ip", "netns", "pids", host.namespace], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def remove(self, host: Host) -> list[int]:
        """SIGKILL every process on ``host``, as a machine that vanished; the PIDs killed."""
        killed = self.pids(host)
        for pid in killed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return killed

    def cut(self, host: Host) -> None:
        """Cut ``host`` off the network (its processes run on, reaching only themselves)."""
        _ip("link", "set", host.link, "down")

    def reconnect(self, host: Host) -> None:
        _ip("link", "set", host.link, "up")

    def impair(self, host: Host, rate: str, loss_percent: int) -> None:
        """Make ``host``'s link slow and lossy both ways: a token bucket of ``rate`` (e.g.
        ``2mbit``; packets queue behind it) on its egress and on the bridge's egress
        towards it, and ``loss_percent`` of the packets through its interface dropped at
        random (nftables), each way. (This kernel has no ``tc netem``.)"""
        shaper = ["tbf", "rate", rate, "burst", "16kb", "latency", "400ms"]
        _in(host, "tc", "qdisc", "replace", "dev", "eth0", "root", *shaper)
        subprocess.run(["tc", "qdisc", "replace", "dev", host.link, "root", *shaper], check=True, capture_output=True)
        rules = (f"table inet {self._tag} {{\n"
                 f"  chain out {{ type filter hook output priority 0; oifname eth0 numgen random mod 100 < {loss_percent} drop; }}\n"
                 f"  chain in {{ type filter hook input priority 0; iifname eth0 numgen random mod 100 < {loss_percent} drop; }}\n"
                 "}\n")
        subprocess.run(["ip", "netns", "exec", host.namespace, "nft", "-f", "-"], input=rules, text=True, check=True,
                       capture_output=True)

    def repair(self, host: Host) -> None:
        """Undo :meth:`impair`."""
        _in(host, "nft", "delete", "table", "inet", self._tag, check=False)
        _in(host, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        subprocess.run(["tc", "qdisc", "del", "dev", host.link, "root"], capture_output=True)

    def close(self) -> None:
        """Kill what runs on the hosts, then delete the namespaces, veths and the bridge."""
        for host in self.hosts.values():
            self.remove(host)
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        for host in self.hosts.values():
            subprocess.run(["ip", "link", "del", host.link], capture_output=True)
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
