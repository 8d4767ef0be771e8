"""Random histories of upserts, deletes and transactions on real table servers (in
process), with blocks sealed, evicted, flushed and recovered between them: a table
server's read filtered on record keys (answered through each block's key index) returns
exactly the rows, in the same order, that its unfiltered read holds for those keys."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any
from unittest import mock

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memtier.client import Transaction
from memtier.config import TableServerConfig
from memtier.tableserver import keyindex
from tests.support.inprocess import InProcessCluster

SCHEMA = pa.schema([("s", pa.string()), ("id", pa.int64()), ("region", pa.string()), ("ts", pa.int64())])
KEYS = 30
#: Record keys: an integer, a string, and both.
VARIANTS = (["id"], ["s"], ["s", "id"])

KEY = st.integers(min_value=0, max_value=KEYS - 1)
OP = st.one_of(
    st.tuples(st.just("write"), st.lists(KEY, min_size=1, max_size=20), st.integers(0, 3)),
    st.tuples(st.just("delete"), st.lists(KEY, min_size=1, max_size=5), st.just(0)),
    st.tuples(st.just("commit"), st.lists(KEY, min_size=1, max_size=10), st.integers(0, 3)),
    st.tuples(st.just("abort"), st.lists(KEY, min_size=1, max_size=10), st.integers(0, 3)),
    st.tuples(st.sampled_from(["evict", "flush", "restart"]), st.just([]), st.just(0)),
)
PROBE = st.lists(st.integers(min_value=-1, max_value=KEYS), min_size=1, max_size=4)


def rows_of(ids: list[int], ts: int) -> pa.Table:
    return pa.table({"s": [f"k{i}" for i in ids], "id": ids, "region": [f"r{i % 3}" for i in ids],
                     "ts": [ts] * len(ids)}, schema=SCHEMA)


def filters_for(key: list[str], probe: list[int]) -> list[tuple[str, str, Any]]:
    by_column = {"id": ("id", "in", probe), "s": ("s", "in", [f"k{i}" for i in probe])}
    return [by_column[c] for c in key] if len(probe) > 1 else [(c, "=", by_column[c][2][0]) for c in key]


def apply(cluster: InProcessCluster, client: Any, op: tuple[str, list[int], int], number: int, key: list[str]) -> None:
    kind, ids, ts = op
    if kind == "write":
        client.write("t", rows_of(ids, ts))
    elif kind == "delete":
        client.delete("t", rows_of(ids, 0).select([*key, "region"]))
    elif kind in ("commit", "abort"):
        tx = Transaction(client, "t", f"batch-{number}")
        tx.write(rows_of(ids, ts))
        tx.commit() if kind == "commit" else tx.abort()
    elif kind == "evict":
        for server in cluster.servers.values():
            server.evict()
    elif kind == "flush":
        client.flush("t")
    else:
        for server_id in list(cluster.servers):
            cluster.restart_server(server_id)


def check(cluster: InProcessCluster, key: list[str], probe: list[int], committed_only: bool) -> None:
    instant = cluster.master.latest_commit("t")
    snapshot = cluster.master.txn_snapshot()
    for server in cluster.servers.values():
        if not server.owned("t"):
            continue
        read = dict(table="t", as_of_instant=instant, snapshot=snapshot, committed_only=committed_only)
        filtered = server.read(**read, key_filters=filters_for(key, probe))
        whole = server.read(**read)
        wanted = pa.array([True] * whole.num_rows, pa.bool_())
        for column, _, values in filters_for(key, probe):  # on the key columns: a delete has only those
            values = values if isinstance(values, list) else [values]
            wanted = pc.and_(wanted, pc.is_in(whole.column(column), value_set=pa.array(values)))
        assert filtered.to_pylist() == whole.filter(wanted).to_pylist()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OP, min_size=1, max_size=8), variant=st.sampled_from(range(len(VARIANTS))),
       probe=PROBE, committed_only=st.booleans(), sort_after=st.sampled_from([1, 2, 64]))
def test_key_filtered_reads_equal_filtering_every_row(ops, variant, probe, committed_only, sort_after) -> None:
    key = VARIANTS[variant]
    root = tempfile.mkdtemp(prefix="memtier-keyindex-")
    # small blocks: a history seals several per file group
    cluster = InProcessCluster(root, config=TableServerConfig(block_max_bytes=2048))
    # integer keys: sorted runs after every read or two, or a tail compared whole
    with mock.patch.object(keyindex, "_SCANS_BEFORE_SORT", sort_after):
        _run_history(cluster, ops, key, probe, committed_only)


def _run_history(cluster: InProcessCluster, ops: list[Any], key: list[str], probe: list[int],
                 committed_only: bool) -> None:
    try:
        for server_id in ("a", "b"):
            cluster.add_server(server_id)
        client = cluster.client()
        client.create_table("t", SCHEMA, record_key=key, ordering_field="ts", partition_fields="region", buckets=2)
        for number, op in enumerate(ops, start=1):
            apply(cluster, client, op, number, key)
            if op[0] == "restart":
                client = cluster.client()
            check(cluster, key, probe, committed_only)
        client.close()
    finally:
        cluster.close()
        shutil.rmtree(cluster.root, ignore_errors=True)


def test_resident_blocks_answer_through_their_index_evicted_ones_from_the_wal() -> None:
    root = tempfile.mkdtemp(prefix="memtier-keyindex-")
    cluster = InProcessCluster(root)
    try:
        server = cluster.add_server("a")
        client = cluster.client()
        client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", buckets=1)
        for ts in range(3):
            client.write("t", rows_of([1, 2, 3], ts))
        (group,) = server._table("t").groups.values()
        (block,) = group.blocks
        found = block.key_frames({"id": [2]})
        assert [(f.producer_seq, rows.tolist()) for f, rows in found] == [(1, [1]), (2, [1]), (3, [1])]
        read = dict(table="t", as_of_instant=None, columns=["id", "ts"], key_filters=[("id", "=", 2)])
        assert server.read(**read).select(["id", "ts"]).to_pylist() == [{"id": 2, "ts": t} for t in range(3)]
        server.evict()
        assert block.key_frames({"id": [2]}) is None  # read back from the WAL stream instead
        assert server.read(**read).select(["id", "ts"]).to_pylist() == [{"id": 2, "ts": t} for t in range(3)]
        client.close()
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)
