"""Append-only (keyless) tables: Hudi-generated record keys, every row kept, read alike by
memtier and hudi-rs before and after compaction and clustering."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from memtier.compaction.worker import ServiceWorker
from memtier.errors import InvalidArgumentError
from memtier.hudi import HudiTable
from memtier.io import join
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.inprocess import InProcessCluster

SCHEMA = pa.schema([("event", pa.string()), ("ts", pa.int64()), ("day", pa.string())])
COLUMNS = SCHEMA.names


def events(n: int, tag: str) -> pa.Table:
    return pa.table({"event": [f"{tag}-{i % 3}" for i in range(n)], "ts": [i % 2 for i in range(n)],
                     "day": [f"d{i % 2}" for i in range(n)]}, schema=SCHEMA)


def _service(cluster: InProcessCluster, kind: str) -> None:
    if cluster.master.schedule_service("t", kind) is not None:
        assert ServiceWorker("svc", cluster.master).run_once()["state"] == "completed"


@pytest.mark.parametrize("ordering", ["ts", None])
def test_every_row_stays_with_hudi_generated_keys(tmp_path, ordering: str | None) -> None:
    root = str(tmp_path)
    cluster = InProcessCluster(root)
    cluster.add_server("ts-0")
    cluster.add_server("ts-1")
    client = cluster.client()
    path = join(root, "t")
    try:
        client.create_table("t", SCHEMA, record_key=None, ordering_field=ordering, partition_fields="day",
                            buckets=3, path=path)
        written = []
        for i in range(6):  # the same rows again and again: none is merged away
            batch = events(10, "e")
            client.write("t", batch)
            written += batch.to_pylist()
            if i == 2:
                client.flush("t")
        expected = sorted(tuple(r[c] for c in COLUMNS) for r in written)
        assert rows(client.read("t"), COLUMNS) == expected
        client.flush("t")
        assert rows(client.read("t"), COLUMNS) == expected
        assert rows(hudi_rs_read(path), COLUMNS) == expected
        properties = open(join(path, ".hoodie", "hoodie.properties")).read()
        assert "hoodie.table.recordkey.fields" not in properties

        meta = HudiTable.open(path).read(include_meta=True)
        keys = meta.column("_hoodie_record_key").to_pylist()
        assert len(set(keys)) == len(keys) == len(written)
        assert all(re.fullmatch(r"\d{17}_\d+_\d+", k) for k in keys)
        assert keys == meta.column("_hoodie_commit_seqno").to_pylist()  # as Hudi 0.14+ makes them
        groups = {(r["_hoodie_partition_path"], r["_hoodie_file_name"][:8]) for r in meta.to_pylist()}
        assert len(groups) > 2, "writes rotate over the file groups"

        _service(cluster, "compaction")
        assert rows(client.read("t"), COLUMNS) == expected
        assert rows(hudi_rs_read(path, "read_optimized"), COLUMNS) == expected
        client.write("t", events(4, "late"))
        client.flush("t")
        expected = sorted([*expected, *(tuple(r[c] for c in COLUMNS) for r in events(4, "late").to_pylist())])
        _service(cluster, "clustering")
        assert rows(client.read("t"), COLUMNS) == expected
        assert rows(hudi_rs_read(path), COLUMNS) == expected
    finally:
        cluster.close()


def test_hudi_layer_writes_and_refuses_deletes(tmp_path) -> None:
    table = HudiTable.create(str(tmp_path / "t"), SCHEMA, None, None, "day", buckets=2)
    table.write(events(5, "a"))
    table.write(events(5, "a"))
    assert table.read().num_rows == 10 == len(hudi_rs_read(table.path))
    with pytest.raises(InvalidArgumentError, match="append-only"):
        table.write(events(1, "a").select(["day"]), operation="delete")
    with pytest.raises(InvalidArgumentError, match="record_key must name at least one column"):
        HudiTable.create(str(tmp_path / "u"), SCHEMA, [], None, "day")
