"""Random interleavings of writes (some by producers a schema change has not reached),
deletes, flushes, compactions, table server restarts and schema changes (by alter_table
and by batches that evolve the table): memtier's reads in every mode equal a model after
every step and at the end, and hudi-rs reads the flushed table through the newest schema
before and after compaction."""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memtier.compaction.worker import ServiceWorker
from memtier.hudi.tablemeta import TableMeta
from memtier.io import open_fileio
from tests.support.evolving import BASE, OPERATIONS, History
from tests.support.hudirs import hudi_rs_read
from tests.support.inprocess import InProcessCluster

pytestmark = pytest.mark.slow  # ~100 s on two cores (12 examples)

#: hudi-rs 0.5 fails to merge a log block written before a change with a newer schema when
#: the block both lacks a column and holds a narrower type, or holds an older struct
#: (measured; Apache Hudi on Spark reads them: tests/interop/test_schema_change_readers.py).
#: Only hudi-rs's read of such a table before compaction may hit it: memtier's readers are
#: checked first, and after compaction hudi-rs must read the model's rows.
HUDI_RS_GAP = ("partial-update column", "reconcile")


@contextmanager
def evolving_table(seed: int, catalog: dict[str, str] | None = None) -> Iterator[tuple[InProcessCluster, History]]:
    """A two-server in-process cluster with table ``t`` of :data:`BASE`, and its history;
    ``catalog``: the master's ``catalog.*`` settings (a metastore it syncs the table to)."""
    root = tempfile.mkdtemp(prefix="memtier-schema-prop-")
    cluster = InProcessCluster(root, catalog=dict(catalog or {}))
    try:
        for server_id in ("a", "b"):
            cluster.add_server(server_id)
        client = cluster.client()
        client.create_table("t", BASE, record_key="id", ordering_field="ts", partition_fields="part", buckets=2)
        rng = random.Random(seed)

        def compact() -> None:
            client.flush("t")
            if client.compact("t", wait=False) is not None:
                while ServiceWorker("svc", cluster.master).run_once() is not None:
                    pass

        def restart() -> None:
            cluster.restart_server(rng.choice(sorted(cluster.servers)))

        yield cluster, History(client, rng, lambda: client.flush("t"), compact, restart)
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


def hudi_rs_rows(path: str, history: History, mode: str = "snapshot") -> list[dict] | str:
    """hudi-rs's rows of the table (the newest schema's columns), or the known gap it hit."""
    try:
        table = hudi_rs_read(path, mode)
    except Exception as e:  # noqa: BLE001 - only the known gap is let through
        assert any(g in str(e) for g in HUDI_RS_GAP), e
        return "gap"
    return table.select(history.schema.names).sort_by("id").to_pylist()


def check_every_reader(cluster: InProcessCluster, history: History) -> None:
    """After the history: the schema every reader sees, and each read mode's rows."""
    client, expected = history.client, history.expected()
    described = client.describe("t")
    assert pa.ipc.read_schema(pa.py_buffer(described["schema"])) == history.schema
    assert described["schema_version"] == history.step
    assert history.read(mode="committed") == expected
    client.flush("t")
    assert history.read() == expected
    path = described["path"]
    meta = TableMeta.load(open_fileio(path), path)
    assert meta.schema == history.schema and meta.schema_version == history.step
    instant = cluster.master.latest_commit("t")
    assert history.read(as_of=instant) == expected
    assert history.read(mode="incremental", start="00000000000000001") == expected
    assert hudi_rs_rows(path, history) in (expected, "gap"), history.log
    history.compact()
    assert history.read() == expected
    assert history.read(mode="read_optimized") == expected
    assert hudi_rs_rows(path, history) == expected, history.log
    assert hudi_rs_rows(path, history, "read_optimized") == expected, history.log


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1),
       operations=st.lists(st.sampled_from(OPERATIONS), min_size=4, max_size=16))
# a base file read (and cached by the client) before a widening, read again after it
@example(seed=0, operations=["upsert", "flush", "upsert", "change", "upsert", "change"])
def test_every_reader_follows_schema_changes(seed: int, operations: list[str]) -> None:
    with evolving_table(seed) as (cluster, history):
        history.run(["upsert", *operations])
        check_every_reader(cluster, history)
