"""Random upsert/delete histories, then table services: a snapshot read (by memtier and by
hudi-rs) is the same before and after a compaction and after a clustering, and after the
compaction the read-optimized view (base files only) holds every row."""

from __future__ import annotations

import shutil
import tempfile

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memtier.compaction.worker import ServiceWorker
from memtier.hudi import HudiTable
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.inprocess import InProcessCluster

SCHEMA = pa.schema([("k", pa.int64()), ("o", pa.int64()), ("part", pa.string()), ("v", pa.string())])
COLUMNS = SCHEMA.names
KEY = st.integers(min_value=0, max_value=24)
UPSERT = st.lists(st.tuples(KEY, st.integers(min_value=-1, max_value=4)), min_size=1, max_size=10)
OP = st.one_of(
    UPSERT.map(lambda r: ("upsert", r)),
    st.lists(KEY, min_size=1, max_size=5).map(lambda k: ("delete", k)),
)


def _write(table: HudiTable, commit: int, kind: str, payload: list) -> None:
    if kind == "upsert":
        batch = [{"k": k, "o": o, "part": f"p{k % 3}", "v": f"c{commit}-r{i}"} for i, (k, o) in enumerate(payload)]
        table.write(pa.Table.from_pylist(batch, schema=SCHEMA))
    else:
        keys = sorted(set(payload))
        table.write(pa.table({"k": keys, "part": [f"p{k % 3}" for k in keys]}), operation="delete")


def _run(cluster: InProcessCluster, kind: str, **options) -> None:
    if cluster.master.schedule_service("t", kind, **options) is not None:
        done = ServiceWorker("svc", cluster.master).run_once()
        assert done["state"] == "completed", done


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OP, min_size=1, max_size=6), sort=st.booleans())
def test_snapshot_reads_are_the_same_before_and_after_compaction_and_clustering(ops, sort) -> None:
    root = tempfile.mkdtemp(prefix="memtier-svc-prop-")
    cluster = InProcessCluster(root)
    try:
        path = f"{root}/t"
        table = HudiTable.create(path, SCHEMA, record_key="k", ordering_field="o", partition_fields="part", buckets=2)
        for commit, (kind, payload) in enumerate(ops, start=1):
            _write(table, commit, kind, payload)
        cluster.add_server("ts-0")
        client = cluster.client()
        client.register_table("t", path)
        before = rows(client.read("t"), COLUMNS)
        assert rows(hudi_rs_read(path), COLUMNS) == before

        _run(cluster, "compaction")
        assert rows(client.read("t"), COLUMNS) == before
        assert rows(client.read("t", mode="read_optimized"), COLUMNS) == before
        assert rows(hudi_rs_read(path), COLUMNS) == before
        assert rows(hudi_rs_read(path, "read_optimized"), COLUMNS) == before

        keys = sorted({k for kind, payload in ops if kind == "upsert" for k, _ in payload})[:5] or [0]
        client.write("t", pa.Table.from_pylist(  # logs on top of the compacted slices
            [{"k": k, "o": 4, "part": f"p{k % 3}", "v": "late"} for k in keys], schema=SCHEMA))
        client.flush("t")
        before = rows(client.read("t"), COLUMNS)
        _run(cluster, "clustering", sort_columns=["v"] if sort else [])
        assert rows(client.read("t"), COLUMNS) == before
        assert rows(hudi_rs_read(path), COLUMNS) == before
        assert rows(hudi_rs_read(path, "read_optimized"), COLUMNS) == before
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)
