"""Schema changes of a served table, in-process (no Ray, no RPC) and over Flight RPC: an
alter while blocks of the old schema sit in memory, in the WAL and in Hudi files; batches
that evolve the table (``schema.evolution`` auto) or are refused whole (off); recovery of
a table server whose WAL holds blocks of both schemas; every reader following."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from memtier.cli import main
from memtier.client import Client
from memtier.compaction.worker import ServiceWorker
from memtier.errors import SchemaEvolutionError, SchemaMismatchError
from memtier.hudi.tablemeta import TableMeta
from memtier.io import open_fileio
from tests.support.hudirs import hudi_rs_read
from tests.support.inprocess import InProcessCluster
from tests.support.rpccluster import CLUSTER_KINDS, RpcCluster, two_servers

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("n", pa.int32()),
                    ("st", pa.struct([("x", pa.int32())]))])
EVOLVED = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("n", pa.int64()),
                     ("st", pa.struct([("x", pa.int32()), ("y", pa.string())])), ("note", pa.string())])
CITIES = ("oslo", "rome")


def old_rows(ids: range, ts: int = 1) -> pa.Table:
    return pa.table({"id": list(ids), "ts": [ts] * len(ids), "city": [CITIES[i % 2] for i in ids],
                     "n": [i for i in ids], "st": [{"x": i} for i in ids]}, schema=SCHEMA)


def new_rows(ids: range, ts: int = 2) -> pa.Table:
    return pa.table({"id": list(ids), "ts": [ts] * len(ids), "city": [CITIES[i % 2] for i in ids],
                     "n": [i + 2**40 for i in ids], "st": [{"x": i, "y": f"y{i}"} for i in ids],
                     "note": [f"note{i}" for i in ids]}, schema=EVOLVED)


def expected(*tables: pa.Table) -> list[dict]:
    """The latest row of every key (later tables win on equal ts), as the evolved schema has it."""
    rows: dict[int, dict] = {}
    for table in tables:
        for row in table.to_pylist():
            old = rows.get(row["id"])
            if old is None or row["ts"] >= old["ts"]:
                rows[row["id"]] = row
    full = []
    for _, row in sorted(rows.items()):
        st = row["st"]
        full.append({**row, "note": row.get("note"), "st": None if st is None else {"x": st["x"], "y": st.get("y")}})
    return full


def read(client: Client, mode: str = "latest") -> list[dict]:
    return client.read("t", mode=mode).sort_by("id").to_pylist()


@pytest.fixture(params=CLUSTER_KINDS)
def cluster(request: pytest.FixtureRequest, tmp_path) -> Iterator[InProcessCluster | RpcCluster]:
    with two_servers(request.param, str(tmp_path / "cluster")) as cluster:
        yield cluster


@pytest.fixture
def client(cluster: InProcessCluster | RpcCluster) -> Iterator[Client]:
    client = cluster.client()
    client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", partition_fields="city", buckets=4)
    yield client
    client.close()


def test_an_alter_with_rows_of_the_old_schema_in_files_memory_and_wal(
    cluster: InProcessCluster | RpcCluster, client: Client,
) -> None:
    flushed, held = old_rows(range(0, 40)), old_rows(range(30, 60), ts=3)
    client.write("t", flushed)
    client.flush("t")
    client.write("t", held)  # in memory and WAL only
    description = client.alter_table("t", add_columns=[pa.field("st.y", pa.string()), ("note", pa.string())],
                                     widen={"n": pa.int64()})
    assert description["schema_version"] == 1
    assert pa.ipc.read_schema(pa.py_buffer(description["schema"])) == EVOLVED
    assert read(client) == expected(flushed, held)  # old rows read up to the new schema
    fresh = new_rows(range(50, 80))
    client.write("t", fresh)
    client.write("t", old_rows(range(90, 95)))  # a producer that has not heard of the change writes on
    want = expected(flushed, held, fresh, old_rows(range(90, 95)))
    assert read(client) == want
    assert read(client, "committed") == want
    client.flush("t")
    assert read(client) == want
    path = client.describe("t")["path"]
    assert hudi_rs_read(path).select(EVOLVED.names).sort_by("id").to_pylist() == want
    client.compact("t", wait=False)
    while ServiceWorker("svc-0", cluster.master).run_once() is not None:
        pass
    assert read(client) == want
    assert read(client, "read_optimized") == want
    assert hudi_rs_read(path).select(EVOLVED.names).sort_by("id").to_pylist() == want


def test_a_batch_with_new_columns_evolves_the_table(client: Client) -> None:
    client.write("t", old_rows(range(0, 10)))
    client.write("t", new_rows(range(5, 15)))  # schema.evolution auto: the table takes them
    described = client.describe("t")
    assert described["schema_version"] == 1 and described["options"] == {"schema.evolution": "auto"}
    assert read(client) == expected(old_rows(range(0, 10)), new_rows(range(5, 15)))
    meta = TableMeta.load(open_fileio(described["path"]), described["path"])
    assert meta.schema == EVOLVED and meta.schema_version == 1


def test_with_evolution_off_such_a_batch_is_refused_whole(client: Client, cluster) -> None:
    client.write("t", old_rows(range(0, 10)))
    client.alter_table("t", options={"schema.evolution": "off"})
    with pytest.raises(SchemaEvolutionError, match=r"schema.evolution=off.*added note string.*refused whole"):
        client.write("t", new_rows(range(20, 30)))
    with pytest.raises(SchemaEvolutionError, match=r"widened n int32 -> int64"):
        client.write("t", old_rows(range(20, 30)).set_column(3, "n", pa.array(range(20, 30), pa.int64())))
    assert client.describe("t")["schema_version"] == 0
    assert read(client) == old_rows(range(0, 10)).to_pylist()


def test_a_refused_change_changes_nothing(client: Client) -> None:
    with pytest.raises(SchemaEvolutionError, match="'n': int32 to int16 narrows it"):
        client.alter_table("t", add_columns=[("note", pa.string())], widen={"n": pa.int16()})
    with pytest.raises(SchemaEvolutionError, match="record-key"):
        client.alter_table("t", widen={"id": pa.string()})
    with pytest.raises(SchemaEvolutionError, match="non-null"):
        client.alter_table("t", add_columns=[pa.field("req", pa.string(), nullable=False)])
    described = client.describe("t")
    assert described["schema_version"] == 0
    assert pa.ipc.read_schema(pa.py_buffer(described["schema"])) == SCHEMA


def test_a_batch_refused_for_its_rows_does_not_evolve_the_table(client: Client) -> None:
    bad = new_rows(range(0, 3)).drop_columns(["ts"])  # new columns, but no ordering column
    with pytest.raises(SchemaMismatchError, match=r"lacks columns \['ts'\]"):
        client.write("t", bad)
    assert client.describe("t")["schema_version"] == 0


def test_a_restarted_server_recovers_blocks_of_both_schemas(tmp_path) -> None:
    cluster = InProcessCluster(str(tmp_path / "cluster"))
    cluster.add_server("a")
    cluster.add_server("b")
    client = cluster.client()
    client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", partition_fields="city", buckets=4)
    before, after = old_rows(range(0, 30)), new_rows(range(20, 50))
    client.write("t", before)
    client.write("t", after)  # evolves the table: the WAL holds blocks of both schemas
    for server_id in list(cluster.servers):
        cluster.restart_server(server_id)
    assert read(client) == expected(before, after)
    client.flush("t")
    assert read(client) == expected(before, after)


def test_memtier_alter(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = RpcCluster(str(tmp_path / "cluster"))
    cluster.add_server("a")
    try:
        client = cluster.client()
        client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", partition_fields="city", buckets=2)
        address = ["--address", cluster.address]
        assert main(["alter", "t", "--add", "note:string", "--add", "st.y:string", "--widen", "n:bigint",
                     "--option", "schema.evolution=off", *address]) == 0
        out = capsys.readouterr().out
        assert "t: now schema version 1, schema.evolution=off" in out and "note  string" in out
        assert pa.ipc.read_schema(pa.py_buffer(client.describe("t")["schema"])) == EVOLVED
        assert main(["alter", "t", "--widen", "n:int", *address]) == 1
        assert "column 'n': int64 to int32 narrows it" in capsys.readouterr().err
        assert main(["alter", "t", "--add", "x:nosuchtype", *address]) == 2
        assert "NAME:TYPE" in capsys.readouterr().err
        assert main(["alter", "t", *address]) == 2
        assert "nothing to change" in capsys.readouterr().err
    finally:
        cluster.close()
