"""The master, table servers and client wired in-process (no Ray, no RPC): writes,
transactions, flushes, memory, restarts, WAL retention and status, one behaviour each."""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

import memtier.tableserver.block as block_module
import memtier.tableserver.flushes as flushes_module
from memtier.client import Client, Transaction
from memtier.config import TableServerConfig, WalConfig
from memtier.errors import InvalidArgumentError, TransactionError, UnknownColumnError
from memtier.hudi import HudiTable
from memtier.hudi.routing import file_group_order
from memtier.io import open_fileio
from memtier.tableserver.server import TableServer
from memtier.wal import SegmentName, read_stream
from memtier.wal.storage import list_logs
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.inprocess import InProcessCluster
from tests.support.model import TableModel, project

SCHEMA = pa.schema(
    [("tenant", pa.string()), ("id", pa.int64()), ("region", pa.string()), ("ts", pa.int64()), ("v", pa.string())]
)
COLUMNS = SCHEMA.names
KEY = ("tenant", "id")
BUCKETS = 4


def batch(ids: Any, ts: int = 1, tag: str = "v") -> pa.Table:
    """Rows of keys ``ids``: two tenants, the region fixed by the id (a key never moves)."""
    ids = list(ids)
    return pa.table(
        {
            "tenant": [f"tenant-{i % 2}" for i in ids],
            "id": ids,
            "region": [f"r{i % 3}" for i in ids],
            "ts": [ts] * len(ids),
            "v": [f"{tag}{i}" for i in ids],
        },
        schema=SCHEMA,
    )


def model() -> TableModel:
    return TableModel(KEY, "ts", ("region",), BUCKETS)


def expected(*batches: pa.Table) -> list[tuple]:
    """What a reader must see after ``batches`` (in order, all committed)."""
    tm = model()
    for commit, data in enumerate(batches, 1):
        tm.upsert(commit, data.to_pylist())
    return project(tm.rows(), COLUMNS)


def create(client: Client, name: str = "t", **options: Any) -> str:
    options = {"record_key": list(KEY), "ordering_field": "ts", "partition_fields": "region",
               "buckets": BUCKETS, **options}
    return client.create_table(name, SCHEMA, **options)["path"]


def held(cluster: InProcessCluster, table: str = "t") -> pa.Table:
    """Every row the table servers hold that the Hudi table lacks, as stored (unmerged)."""
    instant = cluster.master.latest_commit(table)
    parts = [s.read(table, as_of_instant=instant, columns=COLUMNS) for s in cluster.servers.values()
             if s.owned(table)]
    return pa.concat_tables(parts).select(COLUMNS)


def key_count(table: pa.Table) -> int:
    return len(set(zip(table.column("tenant").to_pylist(), table.column("id").to_pylist(), strict=True)))


def heartbeat(cluster: InProcessCluster) -> None:
    """What each server's periodic loop reports to the master in a real cluster."""
    for server_id, server in cluster.servers.items():
        cluster.master.heartbeat(server_id, server.status(), server.bucket_memory(), life=server.life)


def add_server(cluster: InProcessCluster, server_id: str, wal_config: WalConfig) -> TableServer:
    """A table server with its own WAL settings, registered as ``add_server`` does (a new
    location each time, so clients drop the handle of a server that was restarted)."""
    server = TableServer(server_id, cluster.master, cluster.wal_root, config=cluster.config,
                         wal_config=wal_config)
    cluster.servers[server_id] = server
    location = f"inprocess://{server_id}/{uuid.uuid4().hex}"
    server.join(location)
    return server


def wal_blocks(cluster: InProcessCluster) -> set[tuple[str, str, int]]:
    """(partition, file group, block id) of every block with frames in a WAL segment."""
    io = open_fileio(cluster.wal_root)
    return {(b.header.partition, b.header.file_group, b.header.block_id)
            for info in list_logs(io, cluster.wal_root) if SegmentName.parse(info.name)
            for b in read_stream(io, info.path).blocks}


@pytest.fixture
def cluster(tmp_path) -> Iterator[InProcessCluster]:
    cluster = InProcessCluster(str(tmp_path / "cluster"))
    for server_id in ("a", "b", "c"):
        cluster.add_server(server_id)
    yield cluster
    cluster.close()


@pytest.fixture
def client(cluster: InProcessCluster) -> Iterator[Client]:
    client = cluster.client()
    yield client
    client.close()


# == writes and reads =====================================================================


def test_acknowledged_writes_are_readable_at_once(cluster: InProcessCluster, client: Client) -> None:
    create(client)
    writes = [
        batch(range(40)),
        batch(range(20, 60), ts=2, tag="newer"),  # updates win by ordering value
        batch(range(0, 10), ts=0, tag="older"),  # older versions lose, though written later
        batch(range(50, 55), ts=2, tag="tie"),  # equal ordering: the later write wins
    ]
    for n, data in enumerate(writes, 1):
        ack = client.write("t", data)
        assert (ack.rows, ack.duplicate_rows) == (data.num_rows, 0)
        assert rows(client.read("t"), COLUMNS) == expected(*writes[:n])
    assert rows(client.read("t", "committed"), COLUMNS) == expected(*writes)
    assert all(s.owned("t") and s.status()["tables"]["t"]["unflushed_rows"] for s in cluster.servers.values())
    found = client.lookup("t", {"tenant": ["tenant-1", "tenant-0", "tenant-0"], "id": [51, 8, 7]})
    assert rows(found, COLUMNS) == [r for r in expected(*writes) if r[:2] in
                                    {("tenant-1", 51), ("tenant-0", 8)}]
    client.flush("t")  # the same from the files, reading only the columns asked for
    narrow = client.lookup("t", {"tenant": ["tenant-1", "tenant-0", "tenant-0"], "id": [51, 8, 7]},
                           columns=["v", "id"])
    assert narrow.column_names == ["v", "id"]
    assert rows(narrow, ["v", "id"]) == sorted((r[4], r[1]) for r in rows(found, COLUMNS))


def test_table_servers_ship_only_the_rows_of_the_keys_a_read_filters_on(
    cluster: InProcessCluster, client: Client
) -> None:
    create(client)
    client.write("t", batch(range(40)))
    client.write("t", batch(range(5), ts=2, tag="newer"))
    instant = cluster.master.latest_commit("t")
    shipped = pa.concat_tables(
        s.read("t", as_of_instant=instant, columns=COLUMNS, key_filters=[("id", "in", [3, 30])])
        for s in cluster.servers.values() if s.owned("t")
    )
    assert sorted(shipped.column("id").to_pylist()) == [3, 3, 30]  # both versions of 3: unmerged
    with pytest.raises(UnknownColumnError, match="'ts'"):  # only key filters may run unmerged
        owner = next(s for s in cluster.servers.values() if s.owned("t"))
        owner.read("t", as_of_instant=instant, key_filters=[("ts", "=", 1)])
    filtered = client.read("t", filters=[("tenant", "=", "tenant-1"), ("id", "=", 3)])
    assert rows(filtered, COLUMNS) == [r for r in expected(batch(range(40)), batch(range(5), ts=2, tag="newer"))
                                       if r[:2] == ("tenant-1", 3)]


def test_transaction_rows_are_invisible_to_committed_readers_until_commit(client: Client) -> None:
    create(client)
    base = batch(range(10))
    client.write("t", base)
    change = batch(range(5, 15), ts=2, tag="tx")
    with client.transaction("t") as tx:
        tx.write(change)
        assert rows(client.read("t"), COLUMNS) == expected(base, change)
        assert rows(client.read("t", "committed"), COLUMNS) == expected(base)
    assert tx.state == "committed"
    assert rows(client.read("t", "committed"), COLUMNS) == expected(base, change)
    assert rows(client.read("t"), COLUMNS) == expected(base, change)


def test_abort_removes_the_rows_from_latest_and_committed_reads(client: Client) -> None:
    path = create(client)
    base = batch(range(10))
    client.write("t", base)
    with pytest.raises(RuntimeError), client.transaction("t") as tx:  # aborted by the error
        tx.write(batch(range(5, 15), ts=2, tag="aborted"))
        raise RuntimeError("the micro-batch failed")
    assert tx.state == "aborted"
    explicit = Transaction(client, "t", "explicit")
    explicit.write(batch(range(0, 3), ts=3, tag="aborted-too"))
    explicit.abort()
    for mode in ("latest", "committed"):
        assert rows(client.read("t", mode), COLUMNS) == expected(base)
    assert client.flush("t")  # aborted blocks are resolved: they flush, without their rows
    assert rows(HudiTable.open(path).read(), COLUMNS) == expected(base)
    assert rows(client.read("t"), COLUMNS) == expected(base)


def test_a_retried_begin_returns_the_same_transaction(cluster: InProcessCluster, client: Client) -> None:
    create(client)
    first = Transaction(client, "t", "micro-batch-7")
    again = Transaction(client, "t", "micro-batch-7")
    assert (again.txn_id, again.state) == (first.txn_id, "open")
    assert Transaction(client, "t", "micro-batch-8").txn_id != first.txn_id
    other_writer = cluster.client()
    assert Transaction(other_writer, "t", "micro-batch-7").txn_id != first.txn_id
    first.write(batch(range(3)))
    first.commit()
    retried = Transaction(client, "t", "micro-batch-7")  # e.g. a Spark task retried after commit
    assert (retried.txn_id, retried.state) == (first.txn_id, "committed")
    with pytest.raises(TransactionError, match="committed"):
        retried.write(batch(range(3)))


def test_a_duplicate_write_is_dropped_and_reported(cluster: InProcessCluster, client: Client) -> None:
    create(client)
    data = batch(range(30))
    first = client.write("t", data)
    again = client.write("t", data, sequence=first.sequence)  # the acknowledgement was lost
    assert (again.rows, again.duplicate_rows) == (0, data.num_rows)
    assert held(cluster).num_rows == data.num_rows  # stored once, not merged away
    assert rows(client.read("t"), COLUMNS) == expected(data)
    assert client.write("t", data).rows == data.num_rows  # a new sequence is a new write


def test_writes_numbered_by_the_caller_and_writes_not_numbered_mix(cluster: InProcessCluster, client: Client) -> None:
    """A write without a sequence number comes after the highest one the thread gave: it
    is not taken for a retry of a write the caller numbered (found by the chaos soak: a
    transaction's writes after numbered ones were all dropped as duplicates)."""
    create(client)
    numbered = client.write("t", batch(range(10)), sequence=100)
    assert numbered.sequence == 100 and numbered.rows == 10
    plain = client.write("t", batch(range(10, 30)))
    assert plain.sequence == 101 and (plain.rows, plain.duplicate_rows) == (20, 0)
    assert client.read("t").num_rows == 30
    again = client.write("t", batch(range(10)), sequence=100)  # a retry: a number it wrote with
    assert (again.rows, again.duplicate_rows) == (0, 10)
    with pytest.raises(InvalidArgumentError, match=r"sequence 50 is not above 101.*taken for a retry"):
        client.write("t", batch(range(30, 40)), sequence=50)  # never used, yet below: it would vanish
    assert client.read("t").num_rows == 30


def test_concurrent_writes_of_one_client_are_all_kept(cluster: InProcessCluster) -> None:
    """Two threads of one client: the write started first arrives after the other."""
    first_sent, second_done = threading.Event(), threading.Event()
    slow_thread: list[threading.Thread] = []

    class Delayed:
        """A table server on which the first thread's write arrives after the second's."""

        def __init__(self, server: TableServer) -> None:
            self.server = server

        def write(self, table: str, data: Any, **kwargs: Any) -> Any:
            if threading.current_thread() in slow_thread:
                first_sent.set()
                assert second_done.wait(30)
            return self.server.write(table, data, **kwargs)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.server, name)

    client = Client(cluster.master, lambda server_id, _location: Delayed(cluster.servers[server_id]))
    create(client, buckets=1)
    result: dict[str, Any] = {}
    writer = threading.Thread(target=lambda: result.update(first=client.write("t", batch(range(3)))))
    slow_thread.append(writer)
    writer.start()
    assert first_sent.wait(30)
    second = client.write("t", batch(range(3, 5)))
    second_done.set()
    writer.join(30)
    assert result["first"].duplicate_rows == 0 and second.duplicate_rows == 0
    assert rows(client.read("t"), COLUMNS) == expected(batch(range(5)))


# == flushes ==============================================================================


def test_flush_puts_the_rows_into_the_hudi_table(cluster: InProcessCluster, client: Client) -> None:
    path = create(client)
    writes = [batch(range(60)), batch(range(30, 90), ts=2, tag="newer")]
    client.write("t", writes[0])
    assert client.flush("t")
    client.write("t", writes[1])  # a second flush: log files over the first one's files
    assert client.flush("t")
    want = expected(*writes)
    assert rows(HudiTable.open(path).read(), COLUMNS) == want
    assert rows(hudi_rs_read(path), COLUMNS) == want
    assert rows(client.read("t"), COLUMNS) == want
    assert rows(client.read("t", "read_optimized"), COLUMNS) == rows(
        HudiTable.open(path).read("read_optimized"), COLUMNS
    )
    assert held(cluster).num_rows == 0
    assert client.flush("t") == []  # nothing left: no empty instants


def test_open_transactions_hold_back_their_blocks_and_the_ones_after(client: Client) -> None:
    path = create(client, "q", partition_fields=None, buckets=1)  # one file group
    tx = Transaction(client, "q", "slow-batch")
    in_tx = batch(range(10), tag="tx")
    tx.write(in_tx)
    assert client.flush("q") == []  # its block is sealed, but not resolved
    after = batch(range(10, 20), tag="auto")
    client.write("q", after)  # committed at once, in a later block of the same file group
    assert client.flush("q") == []  # blocks flush in order: it waits behind the open one
    assert HudiTable.open(path).read().num_rows == 0
    assert rows(client.read("q", "committed"), COLUMNS) == expected(after)
    tx.commit()
    assert client.flush("q")
    assert rows(HudiTable.open(path).read(), COLUMNS) == expected(in_tx, after)


# == memory ===============================================================================

BUDGET = 64 << 10


def test_memory_stays_within_budget_while_writing_ten_times_it(tmp_path) -> None:
    config = TableServerConfig(memory_budget=BUDGET, block_max_bytes=8 << 10)
    cluster = InProcessCluster(str(tmp_path), config)
    try:
        server = cluster.add_server("a")
        client = cluster.client()
        path = create(client, partition_fields=None, buckets=2)  # few file groups: fast
        writes, written, evicted = [], 0, 0
        for n in itertools.count():
            if written >= 10 * BUDGET:
                break
            data = batch(range(n * 50 % 700, n * 50 % 700 + 150), ts=n, tag=f"w{n}-" + "x" * 20)
            ack = client.write("t", data)
            writes.append(data)
            written += data.nbytes
            evicted += ack.evicted_bytes
        status = server.status()
        assert status["memory_peak"] <= BUDGET, status
        assert status["tables"]["t"]["resident_blocks"] < status["tables"]["t"]["blocks"]
        assert evicted > 0  # the budget was really hit: back-pressure, never an error
        want = expected(*writes)
        assert rows(client.read("t"), COLUMNS) == want  # evicted blocks re-read from the WAL
        assert rows(client.read("t", "committed"), COLUMNS) == want
        instants = client.flush("t")  # flushes read evicted blocks back too...
        assert len(instants) >= written // BUDGET  # ...in rounds of an eighth of the budget
        assert instants == sorted(instants)
        assert rows(HudiTable.open(path).read(), COLUMNS) == want
        assert server.memory.peak <= BUDGET
    finally:
        cluster.close()


def test_a_table_s_blocks_are_sealed_together_and_flushed_a_generation_at_a_time(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write to several file groups is one record in the WAL stream that each of their
    blocks selects rows of: the table's open blocks are sealed together once they hold
    the block size between them, and a flush round takes whole generations, so no two
    rounds read the same writes (a round of one file group's block would read every
    write its block selects from in full)."""
    block = 8 << 10
    config = TableServerConfig(block_max_bytes=block, block_max_age=timedelta(hours=1),
                               flush_interval=timedelta(hours=1))
    cluster = InProcessCluster(str(tmp_path), config)
    try:
        server = cluster.add_server("a")
        client = cluster.client()
        path = create(client, partition_fields=None, buckets=4)
        writes = [batch(range(n * 40, n * 40 + 40), ts=n) for n in range(40)]
        for data in writes:
            client.write("t", data)
        groups = list(server._table("t").groups.values())
        sealed = [[b.generation for b in g.blocks if b.sealed] for g in groups]
        assert len(groups) == 4 and len(sealed[0]) >= 3 and all(s == sealed[0] for s in sealed), sealed
        for generation in sealed[0]:
            size = sum(b.nbytes for g in groups for b in g.blocks if b.generation == generation)
            assert block <= size < 2 * block
        rounds: list[set[str]] = []
        commit = server._commit_flush

        def recorded(t: Any, meta: Any, work: Any, flushed: Any, published: Any) -> Any:
            rounds.append({f.file_id for f in flushed})
            return commit(t, meta, work, flushed, published)

        monkeypatch.setattr(server, "_commit_flush", recorded)
        client.flush("t")
        assert len(rounds) >= len(sealed[0]) and all(len(r) == 4 for r in rounds), rounds
        assert rows(HudiTable.open(path).read(), COLUMNS) == expected(*writes)
    finally:
        cluster.close()


def test_a_read_takes_evicted_blocks_back_from_the_wal_in_one_pass(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Evicted blocks whose frames select rows of the same writes are read back together:
    each write's record once, not once per block."""
    cluster = InProcessCluster(str(tmp_path))
    try:
        server = cluster.add_server("a")
        client = cluster.client()
        create(client, partition_fields=None, buckets=4)
        writes = [batch(range(n * 40, n * 40 + 40), ts=n) for n in range(5)]
        for data in writes:
            client.write("t", data)
        assert server.evict() > 0
        calls: list[int] = []
        read = block_module.read_frames

        def counted(fileio: Any, refs: Any, schema: Any) -> Any:
            calls.append(len(refs))
            return read(fileio, refs, schema)

        monkeypatch.setattr(block_module, "read_frames", counted)
        assert rows(client.read("t"), COLUMNS) == expected(*writes)
        assert calls == [4 * len(writes)]
    finally:
        cluster.close()


def test_forgetting_flushed_blocks_releases_their_memory(
    cluster: InProcessCluster, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(client)
    client.write("t", batch(range(100)))
    client.flush("t")
    monkeypatch.setattr(flushes_module, "_FLUSHED_GRACE_S", 0.0)  # the grace period is over
    for server in cluster.servers.values():
        server.maintain()
        blocks = server.status()["tables"]["t"]["blocks"]
        assert blocks == 0  # the flushed blocks were forgotten...
        assert server.memory.used == 0  # ...so nothing is held any more


# == restarts =============================================================================


def test_restart_server_mid_stream_keeps_every_acknowledged_row_once(
    cluster: InProcessCluster, client: Client
) -> None:
    path = create(client)
    flushed = batch(range(50))
    client.write("t", flushed)
    client.flush("t")
    unflushed = [batch(range(50, 80)), batch(range(80, 100))]
    last = None
    for data in unflushed:
        last = client.write("t", data)
    tx = Transaction(client, "t", "across-restart")
    in_tx = batch(range(100, 110), tag="tx")
    tx.write(in_tx)

    cluster.restart_server("a")  # memory lost, WAL kept

    retry = client.write("t", unflushed[-1], sequence=last.sequence)  # a lost ack, retried
    assert (retry.rows, retry.duplicate_rows) == (0, unflushed[-1].num_rows)
    after = batch(range(110, 140))
    client.write("t", after)
    tx.commit()
    everything = [flushed, *unflushed, in_tx, after]
    assert rows(client.read("t"), COLUMNS) == expected(*everything)
    assert rows(client.read("t", "committed"), COLUMNS) == expected(*everything)
    stored = held(cluster)  # nothing twice: not the flushed rows, not the retried write
    assert stored.num_rows == key_count(stored) == 90

    client.flush("t")
    assert rows(HudiTable.open(path).read(), COLUMNS) == expected(*everything)
    for server_id in list(cluster.servers):
        cluster.restart_server(server_id)
    assert client.flush("t") == []  # flushed blocks are not recovered as unflushed
    assert held(cluster).num_rows == 0
    assert rows(client.read("t"), COLUMNS) == expected(*everything)


def test_after_a_restart_flushed_blocks_still_drop_retries_and_block_ids_go_on(
    cluster: InProcessCluster, client: Client
) -> None:
    """Only unflushed blocks are recovered whole; of the flushed ones the restarted server
    still knows each producer's last sequence number (a retry is dropped) and the last
    block id (a new block never takes a flushed block's id)."""
    path = create(client)
    first = batch(range(50))
    written = client.write("t", first)
    client.flush("t")
    for server_id in list(cluster.servers):
        cluster.restart_server(server_id)
    retry = client.write("t", first, sequence=written.sequence)
    assert (retry.rows, retry.duplicate_rows) == (0, first.num_rows)
    second = batch(range(50, 70), ts=2)
    client.write("t", second)
    for server_id in list(cluster.servers):  # the second write's blocks: unflushed, recovered
        cluster.restart_server(server_id)
    assert rows(client.read("t"), COLUMNS) == expected(first, second)
    client.flush("t")
    assert rows(HudiTable.open(path).read(), COLUMNS) == expected(first, second)


def test_restart_master_keeps_catalog_transactions_and_the_timeline(
    cluster: InProcessCluster, client: Client
) -> None:
    create(client)
    create(client, "q", partition_fields=None, buckets=2)
    base, done_rows = batch(range(20)), batch(range(5), ts=2, tag="done")
    client.write("t", base)
    client.flush("t")
    done = Transaction(client, "t", "done")
    done.write(done_rows)
    done.commit()
    pending = Transaction(client, "t", "pending")
    pending_rows = batch(range(20, 25), tag="pending")
    pending.write(pending_rows)
    tables = {name: client.describe(name) for name in ("t", "q")}
    snapshot, commit = cluster.master.txn_snapshot(), cluster.master.latest_commit("t")

    cluster.restart_master()
    client = Client(cluster.master, lambda server_id, _location: cluster.servers[server_id],
                    producer_id=client.producer_id)  # the same writer, reconnected

    assert client.list_tables() == ["q", "t"]
    for name, before in tables.items():
        after = client.describe(name)
        assert {k: v for k, v in after.items() if k not in PLACEMENT} == {
            k: v for k, v in before.items() if k not in PLACEMENT
        }
        assert sorted(after["routing"]) == sorted(before["routing"])  # every bucket placed
    assert cluster.master.txn_snapshot() == snapshot
    assert cluster.master.latest_commit("t") == commit
    again = Transaction(client, "t", "pending")  # the writer retries its micro-batch
    assert (again.txn_id, again.state) == (pending.txn_id, "open")
    assert Transaction(client, "t", "done").state == "committed"
    assert rows(client.read("t", "committed"), COLUMNS) == expected(base, done_rows)
    assert rows(client.read("t"), COLUMNS) == expected(base, done_rows, pending_rows)
    again.commit()
    want = expected(base, done_rows, pending_rows)
    assert rows(client.read("t", "committed"), COLUMNS) == want
    instants = client.flush("t")
    assert instants and min(instants) > commit  # the new master continues the timeline
    assert rows(HudiTable.open(tables["t"]["path"]).read(), COLUMNS) == want


PLACEMENT = ("routing", "servers", "epoch")


def test_restart_master_keeps_the_placement(cluster: InProcessCluster, client: Client) -> None:
    create(client)
    client.write("t", batch(range(20)))
    routing = client.describe("t")["routing"]
    assert len(set(routing.values())) == 3
    cluster.restart_master()
    owners = {b: [s for s, server in cluster.servers.items() if int(b) in server.owned("t")]
              for b in routing}
    assert owners == {b: [s] for b, s in routing.items()}  # one owner per bucket, as before
    assert cluster.client().describe("t")["routing"] == routing


# == WAL =================================================================================


def test_a_write_to_many_file_groups_costs_one_sync(tmp_path) -> None:
    """Each write below touches 48 file groups (16 buckets x 3 regions): its frames go to
    the table's WAL stream as one append, made durable by one sync."""
    cluster = InProcessCluster(str(tmp_path))
    try:
        server = cluster.add_server("a")
        client = cluster.client()
        create(client, buckets=16)
        client.write("t", batch(range(2)))  # the stream's first segment exists
        before = server.status()["wal"]["syncs"]
        for n in range(10):
            ack = client.write("t", batch(range(n * 400, n * 400 + 400)))
            assert ack.file_groups == 48
        assert server.status()["wal"]["syncs"] - before == 10
        cluster.restart_server("a")  # every block open: recovered from the stream alone
        assert len(client.read("t")) == 4000 + 2 - 2  # keys 0 and 1 written twice
    finally:
        cluster.close()


def test_a_write_s_rows_are_kept_as_they_came_in_any_order(tmp_path) -> None:
    """The server routes every row but keeps the batch it got, in whatever order: each
    file group's frame is a slice of it (rows sent in file-group order, as a client
    splitting a batch between servers sends them) or a selection of it, never a copy; the
    WAL holds the batch once, each block's frame a selection of it."""
    cluster = InProcessCluster(str(tmp_path))
    try:
        server = cluster.add_server("a")
        create(cluster.client(), buckets=16)
        ordered = batch(range(600))
        ordered = ordered.take(pa.array(file_group_order(ordered, list(KEY), ["region"], 16))).combine_chunks()
        shuffled = batch(range(600, 1200)).combine_chunks()
        for seq, (sent, sliced) in enumerate(((ordered, True), (shuffled, False))):
            server.write("t", sent, producer_id=uuid.uuid4().bytes, producer_seq=seq)
            ids = sent.column("id").chunk(0).buffers()[1]
            sent_ids = set(sent.column("id").to_pylist())
            frames = [f for group in server._table("t").groups.values() for block in group.unflushed()
                      for f in block.frames() if f.batch.column("id")[0].as_py() in sent_ids]
            assert sum(f.num_rows for f in frames) == sent.num_rows
            assert sorted(v for f in frames for v in f.batch.column("id").to_pylist()) == sorted(sent_ids)
            assert all(ids.address <= f.source.column("id").buffers()[1].address < ids.address + ids.size
                       for f in frames)
            assert all((f.positions is None) == sliced for f in frames)
        assert sorted(cluster.client().read("t").column("id").to_pylist()) == list(range(1200))
        cluster.restart_server("a")  # every frame read back from the stream's selections
        assert sorted(cluster.client().read("t").column("id").to_pylist()) == list(range(1200))
    finally:
        cluster.close()


# == WAL retention ========================================================================


#: Retention 0, a new WAL segment for every write: each write's blocks can go on their own.
EAGER_RETENTION = WalConfig(retention=timedelta(0), segment_bytes=1, segment_age=timedelta(milliseconds=1))


def test_wal_retention_deletes_only_segments_whose_blocks_are_all_flushed(tmp_path) -> None:
    cluster = InProcessCluster(str(tmp_path))
    try:
        server = add_server(cluster, "a", EAGER_RETENTION)
        client = cluster.client()
        create(client)
        flushed = batch(range(40))
        client.write("t", flushed)
        client.flush("t")
        first_blocks = wal_blocks(cluster)
        in_tx, auto = batch(range(40, 50), tag="tx"), batch(range(50, 60))
        tx = Transaction(client, "t", "open")
        tx.write(in_tx)
        client.flush("t")  # seals the open transaction's blocks; they cannot flush
        client.write("t", auto)  # sealed or open blocks behind them: unflushed too
        unflushed = wal_blocks(cluster) - first_blocks
        assert unflushed and {b for _, _, b in first_blocks} == {1}

        assert server.delete_expired_wals() == 1  # the first write's segment
        assert wal_blocks(cluster) == unflushed  # every unflushed block keeps its frames
        assert server.delete_expired_wals() == 0
        assert rows(client.read("t"), COLUMNS) == expected(flushed, in_tx, auto)
        server.evict()  # read back from the segments left
        assert rows(client.read("t"), COLUMNS) == expected(flushed, in_tx, auto)
        cluster.restart_server("a")  # recovery needs only the segments that are left
        assert rows(client.read("t"), COLUMNS) == expected(flushed, in_tx, auto)
        assert rows(client.read("t", "committed"), COLUMNS) == expected(flushed, auto)
    finally:
        cluster.close()


def test_wal_segments_are_kept_for_the_retention_period(cluster: InProcessCluster, client: Client) -> None:
    create(client)
    client.write("t", batch(range(40)))
    client.flush("t")
    blocks = wal_blocks(cluster)
    assert sum(s.delete_expired_wals() for s in cluster.servers.values()) == 0  # default: 7 days
    assert wal_blocks(cluster) == blocks


def test_wal_retention_bytes_bound_the_flushed_segments_kept_oldest_going_first(tmp_path) -> None:
    """Within the retention period, flushed segments are still deleted, oldest first, once
    they hold more than the retention bytes (a dead incarnation's counted too); an
    unflushed block keeps every segment it has frames in."""
    cluster = InProcessCluster(str(tmp_path))
    try:
        capped = WalConfig(retention_bytes=0, segment_bytes=1, segment_age=timedelta(milliseconds=1))
        add_server(cluster, "a", capped)
        client = cluster.client()
        create(client)
        client.write("t", batch(range(20)))
        cluster.servers.pop("a").close()  # its segments are another incarnation's now
        server = add_server(cluster, "a", capped)
        for n in range(3):
            client.write("t", batch(range(20 + 10 * n, 30 + 10 * n)))
        client.flush("t")
        held = Transaction(client, "t", "open")
        held.write(batch(range(100, 110), tag="tx"))
        client.flush("t")  # seals the open transaction's blocks; they cannot flush
        io = open_fileio(cluster.wal_root)
        flushed_ids = {(f.partition, f.file_id): f.block_id for f in cluster.master.flushed_blocks("t")}

        def segments() -> dict[str, tuple[int, bool]]:  # each segment's size, and whether all flushed
            return {i.path: (i.size, all(b.header.block_id <= flushed_ids.get((b.header.partition, b.header.file_group), 0)
                                         for b in read_stream(io, i.path).blocks))
                    for i in list_logs(io, cluster.wal_root) if SegmentName.parse(i.name)}

        before = segments()
        contents = {p: read_stream(io, p).blocks for p in before}
        unflushed = {p for p, (_, done) in before.items() if not done}
        assert unflushed and len(before) - len(unflushed) >= 3
        flushed_bytes = sum(n for n, done in before.values() if done)
        server._wal_config = dataclasses.replace(capped, retention_bytes=flushed_bytes - 1)
        time.sleep(2 * capped.segment_age.total_seconds())  # the dead incarnation's are stale now
        assert server.delete_expired_wals() == 1  # only as much as the bytes demand
        gone = set(before) - set(segments())
        assert len(gone) == 1 and not gone & unflushed
        assert {b.header.block_id for p in gone for b in contents[p]} == {1}  # the oldest: the dead incarnation's
        server._wal_config = capped  # keep no flushed byte
        assert server.delete_expired_wals() >= 1
        assert set(segments()) == unflushed | {t.stream._current.path for t in server._tables.values()
                                               if t.stream._current is not None}
        held.commit()
        assert rows(client.read("t"), COLUMNS) == expected(
            batch(range(50)), batch(range(100, 110), tag="tx"))
        cluster.restart_server("a")  # recovery needs only the segments that are left
        assert rows(client.read("t"), COLUMNS) == expected(batch(range(50)), batch(range(100, 110), tag="tx"))
    finally:
        cluster.close()


def test_wal_retention_deletes_flushed_blocks_recovered_after_a_restart(tmp_path) -> None:
    cluster = InProcessCluster(str(tmp_path))
    try:
        add_server(cluster, "a", EAGER_RETENTION)
        client = cluster.client()
        create(client)
        client.write("t", batch(range(40)))
        cluster.servers.pop("a").close()  # dies with its blocks open
        server = add_server(cluster, "a", EAGER_RETENTION)
        assert client.flush("t")
        assert wal_blocks(cluster)
        assert server.delete_expired_wals() >= 1  # the dead incarnation's segments
        assert wal_blocks(cluster) == set()
    finally:
        cluster.close()


# == status ===============================================================================


def test_status_reports_servers_memory_blocks_and_lag(cluster: InProcessCluster, client: Client) -> None:
    create(client)
    client.write("t", batch(range(30)))
    tx = Transaction(client, "t", "open")
    tx.write(batch(range(30, 40)))
    heartbeat(cluster)
    status = client.status()
    assert set(status["servers"]) == {"a", "b", "c"}
    for server_id, server in cluster.servers.items():
        reported = status["servers"][server_id]
        assert reported["memory_used"] == server.memory.used > 0
        assert reported["memory_budget"] == cluster.config.memory_budget
        assert reported["tables"]["t"]["blocks"] == reported["tables"]["t"]["unflushed_blocks"] > 0
        writes = reported["writes"]  # every server took a piece of the first write
        assert writes["count"] >= 1 and 0 < writes["p50_ms"] <= writes["p99_ms"] <= writes["max_ms"]
    table = status["tables"]["t"]
    assert table["buckets"] == BUCKETS and table["latest_commit"] is None
    assert table["unflushed_rows"] == 40 and table["lag_s"] > 0
    assert status["open_transactions"] == [tx.txn_id]

    tx.commit()
    instants = client.flush("t")
    heartbeat(cluster)
    status = client.status()
    table = status["tables"]["t"]
    assert (table["unflushed_rows"], table["lag_s"], table["latest_commit"]) == (0, 0.0, max(instants))
    assert status["open_transactions"] == []
    assert all(s["tables"]["t"]["unflushed_blocks"] == 0 for s in status["servers"].values())


def test_a_registered_apache_hudi_table_reads_but_refuses_writes(tmp_path) -> None:
    """A table Apache Hudi wrote without a bucket index: served for reads, writes refused."""
    from memtier.errors import UnsupportedTableError
    from tests.support.samples import SAMPLES, unpack

    sample = next(s for s in SAMPLES if s.name == "v6_trips_8i1u")
    path = str(unpack(sample, tmp_path / "samples"))
    cluster = InProcessCluster(str(tmp_path / "cluster"))
    cluster.add_server("a")
    try:
        client = cluster.client()
        client.register_table("trips", path)
        assert client.read("trips").num_rows == sample.rows
        with pytest.raises(UnsupportedTableError, match="no bucket index"):
            client.write("trips", client.read("trips").slice(0, 1))
    finally:
        cluster.close()


def test_a_registered_table_named_otherwise_than_its_hudi_name_takes_writes(tmp_path) -> None:
    """The cluster's name for a registered table, not its hoodie.table.name, names it in
    flushes (they failed with 'no table named <hudi name>')."""
    path = str(tmp_path / "hudi_named")
    HudiTable.create(path, SCHEMA, record_key=list(KEY), ordering_field="ts", partition_fields="region", buckets=2)
    cluster = InProcessCluster(str(tmp_path / "cluster"))
    cluster.add_server("a")
    try:
        client = cluster.client()
        client.register_table("orders", path)
        data = batch([1, 2, 3], ts=1)
        client.write("orders", data)
        assert client.flush("orders")
        assert rows(hudi_rs_read(path), SCHEMA.names) == rows(data, SCHEMA.names)
    finally:
        cluster.close()
