"""Bad input gets a clear error and changes nothing: no WAL bytes, no rows in memory.

Every check runs in-process and again over Flight RPC (real servers on loopback, no Ray),
so it also proves each error class and message survive the wire.
"""

from __future__ import annotations

import os
import pickle
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest

from memtier.client import Client
from memtier.config import TableServerConfig
from memtier.errors import (
    BatchTooLargeError,
    InvalidArgumentError,
    InvalidRecordKeyError,
    InvalidRowError,
    MemtierError,
    SchemaMismatchError,
    TableNotFoundError,
    TransactionError,
    UnknownColumnError,
)
from memtier.master.service import MasterProxy
from memtier.tableserver.service import TableServerProxy
from tests.support.hudirs import rows
from tests.support.inprocess import InProcessCluster
from tests.support.model import bucket_of
from tests.support.rpccluster import CLUSTER_KINDS, RpcCluster, two_servers
from tests.support.wal import held_blocks

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("ts", pa.int64()), ("v", pa.string())])
BUCKETS = 4
LIMIT = 50  # tableserver.max-batch-rows


def batch(ids: list[int], **columns: list[Any]) -> pa.Table:
    """Rows of ``ids``; ``columns`` replaces or adds columns (unchecked types)."""
    data: dict[str, list[Any]] = {
        "id": ids, "region": [f"r{i % 2}" for i in ids], "ts": [1] * len(ids), "v": [f"v{i}" for i in ids],
    }
    data.update(columns)
    return pa.table(data)


@pytest.fixture(params=CLUSTER_KINDS)
def cluster(request: pytest.FixtureRequest, tmp_path) -> Iterator[InProcessCluster | RpcCluster]:
    with two_servers(request.param, str(tmp_path / "cluster"), TableServerConfig(max_batch_rows=LIMIT)) as cluster:
        yield cluster


@pytest.fixture
def client(cluster: InProcessCluster | RpcCluster) -> Iterator[Client]:
    client = cluster.client()
    client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", partition_fields="region",
                        buckets=BUCKETS)
    client.write("t", batch(list(range(10))))
    yield client
    client.close()


def ids_on(client: Client, server_id: str, count: int, start: int = 1000) -> list[int]:
    """``count`` new keys whose bucket the table server ``server_id`` owns."""
    routing = {int(b): s for b, s in client.describe("t")["routing"].items()}
    assert server_id in routing.values()
    found: list[int] = []
    key = start
    while len(found) < count:
        if routing[bucket_of([str(key)], BUCKETS)] == server_id:
            found.append(key)
        key += 1
    return found


def wal_files(wal_root: str) -> dict[bytes, int]:
    """Every block the WALs hold, and its rows."""
    return held_blocks(wal_root)


def wal_rows(wal_root: str) -> int:
    return sum(held_blocks(wal_root).values())


@contextmanager
def nothing_applied(cluster: InProcessCluster | RpcCluster, client: Client) -> Iterator[None]:
    """The block changes no WAL file (no new file, no new frame), no table server's memory
    and no read(latest) row."""

    def memory() -> dict[str, int]:
        return {s: server.memory.used for s, server in cluster.servers.items()}

    files, frames, held, latest = (
        wal_files(cluster.wal_root), wal_rows(cluster.wal_root), memory(), rows(client.read("t"))
    )
    yield
    assert wal_rows(cluster.wal_root) == frames, "rows of a rejected batch reached a WAL"
    assert wal_files(cluster.wal_root) == files
    assert memory() == held, "rows of a rejected batch reached memory"
    assert rows(client.read("t")) == latest, "rows of a rejected batch are visible"


# == writes ===============================================================================


def test_the_fixture_writes_reach_the_wal(cluster: InProcessCluster | RpcCluster, client: Client) -> None:
    """The no-change probes can fail: an accepted write does change them."""
    files, frames = wal_files(cluster.wal_root), wal_rows(cluster.wal_root)
    client.write("t", batch([1, 500]))
    assert wal_rows(cluster.wal_root) == frames + 2 and wal_files(cluster.wal_root) != files


@pytest.mark.parametrize(
    "operation",
    [
        lambda c: c.write("nope", batch([1])),
        lambda c: c.read("nope"),
        lambda c: c.lookup("nope", [1]),
        lambda c: c.flush("nope"),
        lambda c: c.transaction("nope").__enter__(),
        lambda c: c.drop_table("nope", purge=True),
        lambda c: c.delete("nope", [1]),
    ],
    ids=["write", "read", "lookup", "flush", "begin", "drop", "delete"],
)
def test_unknown_table(cluster, client: Client, operation) -> None:
    with nothing_applied(cluster, client), pytest.raises(TableNotFoundError, match="no table named 'nope'"):
        operation(client)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (batch([1], extra=["x"]), r"schema.evolution=off .*\(added extra string\)"),
        (batch([1, 2]).drop_columns(["ts"]), r"lacks columns \['ts'\]"),
        (batch([1, 2, 3], ts=["x", "y", "z"]), r"column 'ts' has type string, the table expects int64"),
    ],
    ids=["extra-column", "missing-column", "uncastable-type"],
)
def test_schema_mismatch(cluster, client: Client, data: pa.Table, problem: str) -> None:
    """(A table whose schema.evolution is off: with auto, new columns evolve it.)"""
    client.alter_table("t", options={"schema.evolution": "off"})
    with nothing_applied(cluster, client), pytest.raises(SchemaMismatchError, match=problem):
        client.write("t", data)


def test_null_record_key(cluster, client: Client) -> None:
    data = batch([1, 2, 3], id=[1, None, 3])
    with nothing_applied(cluster, client), pytest.raises(
        InvalidRecordKeyError, match="record key column 'id' is null in row 1"
    ):
        client.write("t", data)


def test_null_ordering_value(cluster, client: Client) -> None:
    ids = ids_on(client, "a", 3)
    with nothing_applied(cluster, client), pytest.raises(
        InvalidRowError, match="ordering column 'ts' is null at row 2"
    ):
        client.write("t", batch(ids, ts=[1, 1, None]))


@pytest.mark.parametrize(
    ("keys", "error", "problem"),
    [
        ({"id": ["x"], "region": ["r0"]}, SchemaMismatchError, r"column 'id' has type string, the table expects int64"),
        ({"id": [1, None], "region": ["r1", "r0"]}, InvalidRecordKeyError, "record key column 'id' is null in row 1"),
        ([1, 2], InvalidArgumentError, r"needs the record-key and partition columns; the keys lack \['region'\]"),
        ({"region": ["r0"]}, InvalidArgumentError, r"the keys lack \['id'\]"),
    ],
    ids=["wrong-key-type", "null-key", "no-partition-column", "no-key-column"],
)
def test_bad_deletes(cluster, client: Client, keys: Any, error: type, problem: str) -> None:
    client.write("t", batch([1, 2]))
    with nothing_applied(cluster, client), pytest.raises(error, match=problem):
        client.delete("t", keys)


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (pa.array([1, 0], pa.int64()), r"column '_hoodie_is_deleted' has type int64; it must be boolean"),
        (pa.array(["true", "false"]), r"column '_hoodie_is_deleted' has type string; it must be boolean"),
    ],
    ids=["integer", "string"],
)
def test_a_delete_flag_that_is_not_boolean(cluster, client: Client, flags: pa.Array, problem: str) -> None:
    with nothing_applied(cluster, client), pytest.raises(SchemaMismatchError, match=problem):
        client.write("t", batch([1, 2]).append_column("_hoodie_is_deleted", flags))


def test_a_flagged_batch_with_a_bad_upsert_row_deletes_nothing(cluster, client: Client) -> None:
    """Deleted rows may leave their ordering value out; the rows that stay upserts may not."""
    client.write("t", batch([1, 2]))
    flagged = batch([1, 2], ts=[None, None]).append_column("_hoodie_is_deleted", pa.array([True, False]))
    with nothing_applied(cluster, client), pytest.raises(InvalidRowError, match="ordering column 'ts' is null"):
        client.write("t", flagged)


def test_a_batch_larger_than_the_limit(cluster, client: Client) -> None:
    ids = ids_on(client, "a", LIMIT + 1)
    with nothing_applied(cluster, client), pytest.raises(
        BatchTooLargeError, match=f"{LIMIT + 1} rows exceeds tableserver.max-batch-rows \\({LIMIT}\\)"
    ):
        client.write("t", batch(ids))
    client.write("t", batch(ids[:LIMIT]))  # the limit itself is fine


@pytest.mark.parametrize("bad", ["null-ordering", "uncastable-value", "piece-over-limit"])
def test_a_batch_rejected_by_one_server_is_applied_on_none(cluster, client: Client, bad: str) -> None:
    good, other = ids_on(client, "a", 5), ids_on(client, "b", 1)
    if bad == "piece-over-limit":
        good, other = ids_on(client, "a", 3), ids_on(client, "b", LIMIT + 1)
    ids = good + other
    ts: list[Any] = [1] * len(ids)
    if bad == "null-ordering":
        ts[-1] = None
    elif bad == "uncastable-value":
        ts = [str(t) for t in ts[:-1]] + ["not-a-number"]
    with nothing_applied(cluster, client), pytest.raises(MemtierError):
        client.write("t", batch(ids, ts=ts))


# == transactions =========================================================================


def test_write_through_a_committed_transaction(cluster, client: Client) -> None:
    with client.transaction("t") as tx:
        tx.write(batch([1]))
    with nothing_applied(cluster, client), pytest.raises(TransactionError, match="is committed"):
        tx.write(batch([2]))


@pytest.mark.parametrize("outcome", ["committed", "aborted"])
def test_write_to_a_resolved_transaction(cluster, client: Client, outcome: str) -> None:
    """A writer holding only the id (another process, a retried task) is refused by the
    table servers, which have not seen the transaction before."""
    txn_id = client.master.begin_txn("t", "other-writer", "batch-1")["txn_id"]
    (client.master.commit_txn if outcome == "committed" else client.master.abort_txn)(txn_id)
    with nothing_applied(cluster, client), pytest.raises(
        TransactionError, match=f"transaction {txn_id} is already {outcome}"
    ):
        client.write("t", batch([1, 2, 3, 4, 5, 6]), txn_id=txn_id)


def test_write_to_a_transaction_committed_after_the_servers_saw_it_open(cluster, client: Client) -> None:
    txn_id = client.master.begin_txn("t", "other-writer", "batch-1")["txn_id"]
    client.write("t", batch([1, 2, 3, 4, 5, 6]), txn_id=txn_id)  # every server sees it open
    client.master.commit_txn(txn_id)
    with nothing_applied(cluster, client), pytest.raises(TransactionError, match="already committed"):
        client.write("t", batch([100, 101, 102, 103, 104, 105]), txn_id=txn_id)


def test_write_to_a_transaction_never_begun(cluster, client: Client) -> None:
    with nothing_applied(cluster, client), pytest.raises(TransactionError, match="999 was never begun"):
        client.write("t", batch([1, 2, 3, 4]), txn_id=999)


# == table names ==========================================================================

BAD_NAMES = ["../x", "a/b", "/abs", "..", ".", "", "a b", "a.b", "1abc", "x" * 129, "tëst", "a\\b"]


def tree(root: str) -> set[str]:
    return {os.path.join(d, n) for d, dirs, files in os.walk(root) for n in dirs + files}


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_table_name_that_is_not_a_plain_identifier(cluster, client: Client, name: str, tmp_path) -> None:
    existing = client.describe("t")["path"]
    before = tree(str(tmp_path))
    message = re.escape(f"table name {name!r} is not a plain identifier")
    with pytest.raises(InvalidArgumentError, match=message):
        client.create_table(name, SCHEMA, record_key="id", ordering_field="ts")
    with pytest.raises(InvalidArgumentError, match=message):
        client.register_table(name, existing)
    for refused in (
        lambda: client.write(name, batch([1])),
        lambda: client.read(name),
        lambda: client.drop_table(name, purge=True),
        lambda: client.master.begin_txn(name, "w", "b"),
    ):
        with pytest.raises(TableNotFoundError):
            refused()
    assert tree(str(tmp_path)) == before  # no file or directory made or removed anywhere
    assert client.list_tables() == ["t"]


# == reads ================================================================================


def test_unknown_read_mode(client: Client) -> None:
    with pytest.raises(InvalidArgumentError, match="mode must be one of .* got 'snapshot_isolation'"):
        client.read("t", "snapshot_isolation")


@pytest.mark.parametrize("mode", ["latest", "committed", "read_optimized"])
def test_unknown_filter_column(client: Client, mode: str) -> None:
    with pytest.raises(UnknownColumnError, match="filter column 'colour' is not in the table"):
        client.read("t", mode, filters=[("colour", "=", "red")])


def test_unknown_filter_operator_and_projection(client: Client) -> None:
    with pytest.raises(InvalidArgumentError, match="filter operator '~=' on 'v'"):
        client.read("t", filters=[("v", "~=", "x")])
    with pytest.raises(UnknownColumnError, match=r"columns \['colour'\] are not in the table"):
        client.read("t", columns=["id", "colour"])


# == the wire =============================================================================

SERVER_SIDE = {
    "null-key": (batch([1, 2], id=[1, None]), InvalidRecordKeyError),
    "null-ordering": (batch([1, 2], ts=[None, 1]), InvalidRowError),
    "schema": (batch([1], extra=["x"]), SchemaMismatchError),
    "too-large": (batch(list(range(LIMIT + 1))), BatchTooLargeError),
    "never-begun": (batch([1]), TransactionError),
}


@pytest.mark.parametrize("case", sorted(SERVER_SIDE))
def test_server_errors_keep_class_and_message_over_the_wire(tmp_path, case: str) -> None:
    """Sent straight to a table server (no client-side check first), over Flight and
    in-process: the same error class with the same message, and nothing applied."""
    data, expected = SERVER_SIDE[case]
    cluster = RpcCluster(str(tmp_path), TableServerConfig(max_batch_rows=LIMIT))
    try:
        server = cluster.add_server("a")
        client = cluster.client()
        client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", buckets=BUCKETS)
        proxy = TableServerProxy(cluster.endpoints["a"].location)
        txn_id = 999 if case == "never-begun" else 0
        with pytest.raises(expected) as local:
            server.write("t", data, txn_id=txn_id)
        with nothing_applied(cluster, client), pytest.raises(expected) as remote:
            proxy.write("t", data, txn_id=txn_id, producer_id=bytes(16), producer_seq=1)
        assert type(remote.value) is type(local.value) and str(remote.value) == str(local.value)
    finally:
        cluster.close()


def test_an_unknown_call_is_refused_by_name_and_proxies_pickle(tmp_path) -> None:
    cluster = RpcCluster(str(tmp_path))
    try:
        cluster.add_server("a")
        master = MasterProxy(cluster.address)
        server = TableServerProxy(cluster.endpoints["a"].location)
        with pytest.raises(InvalidArgumentError, match="the master has no call 'vacuum'"):
            master._call("vacuum")
        with pytest.raises(InvalidArgumentError, match="a table server has no call 'vacuum'"):
            server._call("vacuum")
        copies = pickle.loads(pickle.dumps((master, server)))
        assert [type(c) for c in copies] == [MasterProxy, TableServerProxy]
        assert copies[0].servers() == {"a": server.location} and copies[1].ping() == "a"
    finally:
        cluster.close()
