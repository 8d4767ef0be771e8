"""The scenario suite against the in-process core: master, table servers and client as
plain objects (tests/support/scenario.py runs the same against real Ray actors)."""

from __future__ import annotations

import random
import shutil
import tempfile
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memtier.config import FlushWorker, TableServerConfig
from memtier.io import join
from tests.support.inprocess import InProcessCluster
from tests.support.scenario import random_ops, run_scenario

SERVERS = 2


class InProcessHarness:
    def __init__(self, root: str, config: TableServerConfig) -> None:
        self.cluster = InProcessCluster(root, config)
        for i in range(SERVERS):
            self.cluster.add_server(f"ts-{i}")
        self.client = self.cluster.client()
        self.servers = SERVERS

    def evict(self) -> None:
        for server in self.cluster.servers.values():
            server.evict()

    def restart(self, index: int) -> None:
        self.cluster.restart_server(f"ts-{index}")


def _run(seed: int, steps: int, config: TableServerConfig, *, deletes: bool = False, keyless: bool = False,
         table_version: int = 6) -> None:
    root = tempfile.mkdtemp(prefix="memtier-scenario-")
    harness = InProcessHarness(root, config)
    try:
        ops = random_ops(random.Random(seed), steps, SERVERS, deletes=deletes)
        run_scenario(harness, "scenario", join(root, "tables", "scenario"), ops, keyless=keyless,
                     table_version=table_version)
    finally:
        harness.cluster.close()
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), steps=st.integers(5, 30))
def test_random_scenarios(seed: int, steps: int) -> None:
    _run(seed, steps, TableServerConfig())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), steps=st.integers(5, 30))
def test_random_scenarios_with_deletes(seed: int, steps: int) -> None:
    """Deletes (keys only, with ordering values, flagged rows of a write, in
    transactions) mixed into the same interleavings."""
    _run(seed, steps, TableServerConfig(), deletes=True)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), steps=st.integers(5, 30))
def test_random_scenarios_with_deletes_on_table_version_9(seed: int, steps: int) -> None:
    """The same on a table of Hudi table version 9 (timeline layout 2: completion times,
    log files named by their deltacommit, Avro commit metadata), hudi-rs reading it."""
    _run(seed, steps, TableServerConfig(), deletes=True, table_version=9)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), steps=st.integers(5, 30))
def test_random_scenarios_on_an_append_only_table(seed: int, steps: int) -> None:
    """No record key: every acknowledged row stays (retries still dropped), in every mode."""
    _run(seed, steps, TableServerConfig(), keyless=True)


def test_tiny_memory_budget_with_deletes() -> None:
    _run(11, 40, TableServerConfig(memory_budget=4096, block_max_bytes=2048), deletes=True)


def test_tiny_memory_budget_evicts_and_reads_back_from_the_wal() -> None:
    """A budget of a few KB: most blocks are evicted as writes arrive; reads and flushes
    re-read them from their WAL files and results stay exact."""
    _run(7, 40, TableServerConfig(memory_budget=4096, block_max_bytes=2048))


def test_scenario_with_deletes_in_row_groups_of_two_rows() -> None:
    """Base files cut into row groups of two rows (flushes run inline, so they see the
    setting): key-filtered reads and lookups prune row groups on every boundary."""
    with patch("memtier.hudi.parquetfile.ROW_GROUP_ROWS", 2):
        _run(5, 40, TableServerConfig(flush_worker=FlushWorker.INLINE), deletes=True)
