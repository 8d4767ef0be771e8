"""CPU placement settings: parsing, what ``auto`` gives the pool and the table servers,
and pinning a real process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from memtier.config import ClusterConfig, load
from memtier.errors import InvalidArgumentError
from memtier.placement import CpuSet, describe, parse_cpus, pin, server_cpus, service_cpus

TWO = frozenset({0, 1})
EIGHT = frozenset(range(8))


def test_cpu_lists_parse_as_taskset_writes_them() -> None:
    assert parse_cpus("auto") == CpuSet("auto") and parse_cpus(" None ") == CpuSet("none")
    assert parse_cpus("1").cpus == {1}
    assert parse_cpus("0,2-4, 7").cpus == {0, 2, 3, 4, 7}
    assert describe(frozenset({0, 2, 3, 4, 7})) == "0,2-4,7"
    for bad in ("", "one", "3-1", "1-", "-1", "1;2"):
        with pytest.raises(ValueError):
            parse_cpus(bad)


def test_a_bad_cpu_setting_is_refused_naming_its_key() -> None:
    with pytest.raises(InvalidArgumentError, match="cluster.service-cpus"):
        load(ClusterConfig, {"cluster.service-cpus": "1-x"})


def test_auto_gives_the_pool_one_core_of_two_and_the_table_servers_the_other() -> None:
    auto = CpuSet("auto")
    assert service_cpus(auto, TWO) == {1} and server_cpus(auto, auto, TWO) == {0}
    assert service_cpus(auto, EIGHT) == {6, 7} and server_cpus(auto, auto, EIGHT) == set(range(6))
    assert service_cpus(auto, frozenset({3})) is None and server_cpus(auto, auto, frozenset({3})) is None


def test_explicit_and_disabled_placements() -> None:
    none, auto = CpuSet("none"), CpuSet("auto")
    assert service_cpus(none, TWO) is None and server_cpus(auto, none, TWO) is None
    assert server_cpus(none, auto, TWO) is None
    assert service_cpus(parse_cpus("2-3"), EIGHT) == {2, 3}
    assert server_cpus(auto, parse_cpus("2-3"), EIGHT) == EIGHT - {2, 3}
    assert service_cpus(parse_cpus("0-1"), TWO) == TWO and server_cpus(auto, parse_cpus("0-1"), TWO) is None
    assert service_cpus(parse_cpus("5"), TWO) is None  # names no CPU here: not pinned


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_pin_moves_a_real_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        target = frozenset({max(os.sched_getaffinity(0))})
        assert pin(target, child.pid) == target
        status = open(f"/proc/{child.pid}/status").read()
        assert f"Cpus_allowed_list:\t{describe(target)}" in status
    finally:
        child.kill()
        child.wait()
