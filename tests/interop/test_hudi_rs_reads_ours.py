"""Interop out: hudi-rs reads the tables memtier writes, with the rows a model predicts,
in snapshot, read-optimized, incremental and time-travel modes."""

from __future__ import annotations

import copy
import datetime as dt
import decimal
import random
from typing import Any

import pyarrow as pa
import pytest

from memtier.hudi import HudiTable, filegroup
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.model import TableModel, project

SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("name", pa.string()),
    ("region", pa.string()),
    ("version", pa.int64()),
    ("small", pa.int32()),
    ("score", pa.float32()),
    ("amount", pa.float64()),
    ("price", pa.decimal128(10, 2)),
    ("payload", pa.binary()),
    ("active", pa.bool_()),
    ("day", pa.date32()),
    ("ts", pa.timestamp("us", tz="UTC")),
    ("tags", pa.list_(pa.string())),
    ("attrs", pa.map_(pa.string(), pa.int32())),
    ("address", pa.struct([("city", pa.string()), ("zip", pa.int32())])),
])
REGIONS = ["eu", "us", "apac"]
DATA_COLUMNS = SCHEMA.names


def make_row(rng: random.Random, key: int, version: int) -> dict[str, Any]:
    def maybe(value: Any) -> Any:
        return None if rng.random() < 0.1 else value

    return {
        "id": key,
        "name": f"user-{key % 17}",
        "region": REGIONS[key % 3],
        "version": version,
        "small": maybe(rng.randint(-1000, 1000)),
        "score": maybe(float(rng.randint(0, 100)) / 4),
        "amount": maybe(rng.random() * 1e6),
        "price": maybe(decimal.Decimal(rng.randint(-10**6, 10**6)) / 100),
        "payload": maybe(rng.randbytes(rng.randint(0, 20))),
        "active": maybe(rng.random() < 0.5),
        "day": maybe(dt.date(2020, 1, 1) + dt.timedelta(days=rng.randint(0, 2000))),
        "ts": maybe(dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
                    + dt.timedelta(microseconds=rng.randint(0, 10**12))),
        "tags": maybe([f"t{rng.randint(0, 9)}" for _ in range(rng.randint(0, 3))]),
        "attrs": maybe([(f"a{i}", rng.randint(0, 9)) for i in range(rng.randint(0, 2))]),
        "address": maybe({"city": maybe(f"c{rng.randint(0, 5)}"), "zip": maybe(rng.randint(1000, 9999))}),
    }


def to_arrow(batch: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(batch, schema=SCHEMA)


def comparable(rows_: list[dict[str, Any]]) -> list[tuple]:
    """Model rows in the same shape hudi-rs and memtier return (maps as key/value lists)."""
    return project(to_arrow(rows_).to_pylist() if rows_ else [], DATA_COLUMNS)


@pytest.fixture(params=[
    ("MERGE_ON_READ", "avro", ["id", "name"], ["region"]),
    ("MERGE_ON_READ", "parquet", ["id"], ["region"]),
    ("MERGE_ON_READ", "avro", ["id"], []),
    ("COPY_ON_WRITE", "avro", ["id", "name"], ["region"]),
], ids=["mor-avro-complexkey", "mor-parquet", "mor-nonpartitioned", "cow"])
def written(request: pytest.FixtureRequest, tmp_path, monkeypatch: pytest.MonkeyPatch):
    """A table with four commits (inserts, updates incl. late data, deletes, more upserts);
    log files hold several data blocks of one instant, as a large change writes them."""
    monkeypatch.setattr(filegroup, "LOG_BLOCK_ROWS", 7)
    table_type, block_format, key, partitions = request.param
    path = str(tmp_path / "tbl")
    table = HudiTable.create(
        path, SCHEMA, record_key=key, ordering_field="version", partition_fields=partitions,
        buckets=3, table_type=table_type, log_block_format=block_format,
    )
    model = TableModel(
        tuple(key), "version", tuple(partitions), buckets=3, copy_on_write=table_type == "COPY_ON_WRITE"
    )
    rng = random.Random(7)
    instants, snapshots, models = [], [], []

    def commit(kind: str, batch: list) -> None:
        number = len(instants) + 1
        if kind == "delete":
            instant = table.write(to_arrow(batch), operation="delete")
            model.delete(number, batch)
        else:
            instant = table.write(to_arrow(batch))
            model.upsert(number, batch)
        instants.append(instant)
        snapshots.append(comparable(model.rows()))
        models.append(copy.deepcopy(model))

    commit("upsert", [make_row(rng, k, 1) for k in range(120)])
    commit("upsert", [make_row(rng, k, 2) for k in range(0, 120, 4)]
           + [make_row(rng, k, 0) for k in range(1, 120, 8)]  # late data: must not win
           + [make_row(rng, k, 1) for k in range(120, 140)])
    commit("delete", [make_row(rng, k, 9) for k in range(0, 140, 10)])
    commit("upsert", [make_row(rng, k, 3) for k in range(2, 140, 6)])
    return path, table_type, models, instants, snapshots


def test_snapshot(written) -> None:
    path, _, models, _, snapshots = written
    model = models[-1]
    expected = snapshots[-1]
    assert expected == comparable(model.rows())
    assert rows(HudiTable.open(path).read(), DATA_COLUMNS) == expected
    assert rows(hudi_rs_read(path), DATA_COLUMNS) == expected


def test_time_travel(written) -> None:
    path, _, _, instants, snapshots = written
    table = HudiTable.open(path)
    for instant, expected in zip(instants, snapshots, strict=True):
        assert rows(table.read(as_of=instant), DATA_COLUMNS) == expected
        assert rows(hudi_rs_read(path, as_of=instant), DATA_COLUMNS) == expected


def test_incremental(written) -> None:
    """memtier returns the merged rows last written in (start, end], as Java Hudi does.
    hudi-rs does the same on copy-on-write tables, but on merge-on-read tables merges only
    what was written in that range (late data that lost to an older version shows up
    there). Each reader is checked against the model of what it does."""
    path, table_type, models, instants, _ = written
    table = HudiTable.open(path)
    for start in range(len(instants) - 1):
        for end in range(start + 1, len(instants)):
            as_of_end = models[end]
            merged = comparable(as_of_end.changed_since(start + 1, end + 1))
            ours = table.read(mode="incremental", start=instants[start], end=instants[end])
            assert rows(ours, DATA_COLUMNS) == merged, (start, end)
            theirs = hudi_rs_read(path, "incremental", start=instants[start], end=instants[end])
            expected = merged if table_type == "COPY_ON_WRITE" else comparable(
                as_of_end.hudi_rs_incremental(start + 1, end + 1)
            )
            assert rows(theirs, DATA_COLUMNS) == expected, (start, end)


def test_read_optimized(written) -> None:
    path = written[0]
    ours = HudiTable.open(path).read(mode="read_optimized")
    assert rows(ours, DATA_COLUMNS) == rows(hudi_rs_read(path, "read_optimized"), DATA_COLUMNS)


def test_projection_and_filters(written) -> None:
    path, _, models, _, _ = written
    model = models[-1]
    table = HudiTable.open(path)
    got = table.read(columns=["id", "version"], filters=[("region", "=", "eu"), ("version", ">=", 2)])
    expected = sorted(
        (r["id"], r["version"]) for r in model.rows() if r["region"] == "eu" and r["version"] >= 2
    )
    assert got.column_names == ["id", "version"]
    assert sorted(zip(got.column("id").to_pylist(), got.column("version").to_pylist(), strict=True)) == expected
