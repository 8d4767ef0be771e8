"""Which CPUs memtier's processes run on.

Ray's CPU reservation is bookkeeping: it keeps Ray from scheduling more actors than a node
has CPUs, but every process still runs on every core. To keep compaction and flush
encoding from taking the cores that acknowledge writes, table-service actors and the
table servers' flush workers are pinned (``sched_setaffinity``) to one set of CPUs
(``cluster.service-cpus``) and table servers to another (``cluster.server-cpus``). Each
process resolves the settings against the CPUs it may use on its own node, so one
configuration serves nodes of any size.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

__all__ = ["CpuSet", "available", "background", "describe", "parse_cpus", "pin", "server_cpus", "service_cpus"]

log = logging.getLogger(__name__)

AUTO = "auto"
NONE = "none"


@dataclass(frozen=True)
class CpuSet:
    """A placement setting: ``auto``, ``none`` (no pinning) or explicit CPU numbers."""

    mode: str
    cpus: frozenset[int] = frozenset()

    def __str__(self) -> str:
        return describe(self.cpus) if self.mode == "list" else self.mode


def parse_cpus(text: str) -> CpuSet:
    """``"auto"``, ``"none"``, or a CPU list as ``taskset -c`` takes it: ``"1"``, ``"0,2"``, ``"2-5,8"``."""
    text = text.strip().lower()
    if text in (AUTO, NONE):
        return CpuSet(text)
    cpus: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or dash and not high.isdigit():
            raise ValueError("not a CPU list: use auto, none, or numbers and ranges such as 1 or 0,2-3")
        if high and int(high) < int(low):
            raise ValueError(f"the range {part.strip()} runs backwards")
        cpus.update(range(int(low), int(high or low) + 1))
    return CpuSet("list", frozenset(cpus))


def available() -> frozenset[int]:
    """The CPUs this process may run on."""
    return frozenset(os.sched_getaffinity(0))


def service_cpus(setting: CpuSet, cpus: frozenset[int]) -> frozenset[int] | None:
    """Where table-service actors and flush workers run, out of ``cpus`` (None: anywhere).
    ``auto``: the highest-numbered quarter of the CPUs (at least one) when there are two or
    more, so on a 2-core machine the pool gets one core and the table servers the other."""
    if setting.mode == NONE or len(cpus) < 2 and setting.mode == AUTO:
        return None
    if setting.mode == AUTO:
        return frozenset(sorted(cpus)[-max(1, len(cpus) // 4):])
    return _within(setting.cpus, cpus, "cluster.service-cpus")


def server_cpus(setting: CpuSet, services: CpuSet, cpus: frozenset[int]) -> frozenset[int] | None:
    """Where table servers run, out of ``cpus`` (None: anywhere). ``auto``: every CPU the
    services do not have (anywhere, if they have them all or are not pinned)."""
    if setting.mode == NONE:
        return None
    if setting.mode == AUTO:
        theirs = service_cpus(services, cpus)
        return None if theirs is None or theirs >= cpus else cpus - theirs
    return _within(setting.cpus, cpus, "cluster.server-cpus")


def _within(wanted: frozenset[int], cpus: frozenset[int], key: str) -> frozenset[int] | None:
    usable = wanted & cpus
    if not usable:
        log.warning("%s=%s names no CPU this process may use (%s); not pinning", key, describe(wanted), describe(cpus))
        return None
    return frozenset(usable)


def pin(cpus: frozenset[int] | None, pid: int = 0) -> frozenset[int]:
    """Pin process ``pid`` (this one by default) to ``cpus`` (None: leave it); the CPUs it
    may run on afterwards."""
    if cpus is not None:
        os.sched_setaffinity(pid, cpus)
    return frozenset(os.sched_getaffinity(pid))


def background() -> str:
    """Schedule every thread of this process, and those it starts later, only on CPU time
    no other process wants (``SCHED_IDLE``; nice 19 where the kernel lacks it), so table
    services never take a core from a table server, a flush worker or a client. The policy
    set, as ``ps`` names it."""
    policy, name = (os.SCHED_IDLE, "idle") if hasattr(os, "SCHED_IDLE") else (None, "nice 19")
    for task in os.listdir("/proc/self/task"):
        try:
            if policy is None:
                os.setpriority(os.PRIO_PROCESS, int(task), 19)
            else:
                os.sched_setscheduler(int(task), policy, os.sched_param(0))
        except ProcessLookupError:  # the thread ended meanwhile
            continue
    return name


def describe(cpus: frozenset[int]) -> str:
    """A CPU set as ``taskset -c`` prints it: ``{0, 1, 2, 5}`` -> ``"0-2,5"``."""
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
