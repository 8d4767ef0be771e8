"""Bad input to the Hudi layer: a clear MemtierError naming the problem, and nothing
written (no timeline file, no data file) for a rejected write."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from memtier.errors import (
    InvalidArgumentError,
    InvalidRecordKeyError,
    InvalidRowError,
    NotATableError,
    SchemaMismatchError,
    TableExistsError,
    UnknownColumnError,
    UnsupportedTableError,
)
from memtier.hudi import HudiTable
from tests.support.samples import SAMPLES, unpack

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("p", pa.string()), ("v", pa.string())])


def files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def table(tmp_path: Path) -> HudiTable:
    t = HudiTable.create(str(tmp_path / "t"), SCHEMA, record_key="id", ordering_field="ts",
                         partition_fields="p", buckets=2)
    t.write(pa.table({"id": [1, 2], "ts": [1, 1], "p": ["a", "b"], "v": ["x", "y"]}, schema=SCHEMA))
    return t


BAD_WRITES = {
    "missing column": (pa.table({"id": [3], "v": ["x"], "p": ["a"]}), "upsert", SchemaMismatchError,
                       "lacks columns \\['ts'\\]"),
    "extra column": (pa.table({"id": [3], "ts": [1], "p": ["a"], "v": ["z"], "w": [0]}), "upsert",
                     SchemaMismatchError, "columns \\['w'\\] that the table does not have"),
    "uncastable": (pa.table({"id": ["x"], "ts": [1], "p": ["a"], "v": ["z"]}), "upsert",
                   SchemaMismatchError, "column 'id' has type string"),
    "null key": (pa.table({"id": pa.array([3, None], pa.int64()), "ts": [1, 1], "p": ["a", "a"], "v": ["z", "z"]}),
                 "upsert", InvalidRecordKeyError, "'id' is null in row 1"),
    "null ordering": (pa.table({"id": [3, 4], "ts": pa.array([1, None], pa.int64()), "p": ["a", "a"], "v": ["z", "z"]}),
                      "upsert", InvalidRowError, "ordering column 'ts' is null at row 1"),
    "slash in partition": (pa.table({"id": [3], "ts": [1], "p": ["a/b"], "v": ["z"]}), "upsert",
                           InvalidRowError, "must not contain '/'"),
    "delete without key": (pa.table({"p": ["a"]}), "delete", SchemaMismatchError, "lacks columns \\['id'\\]"),
    "unknown operation": (pa.table({"id": [3], "ts": [1], "p": ["a"], "v": ["z"]}), "merge",
                          InvalidArgumentError, "operation must be one of"),
    "not a table": ({"id": [3]}, "upsert", InvalidArgumentError, "data must be a pyarrow.Table"),
}


@pytest.mark.parametrize("case", BAD_WRITES, ids=list(BAD_WRITES))
def test_a_rejected_write_changes_nothing(table: HudiTable, case: str) -> None:
    data, operation, error, message = BAD_WRITES[case]
    root = Path(table.path)
    before, rows = files(root), table.read().sort_by("id")
    with pytest.raises(error, match=message):
        table.write(data, operation=operation)
    assert files(root) == before, "a rejected write left files behind"
    assert table.read().sort_by("id").equals(rows)


BAD_READS = {
    "unknown column": ({"columns": ["nope"]}, UnknownColumnError, "columns \\['nope'\\] are not in the table"),
    "unknown filter column": ({"filters": [("nope", "=", 1)]}, UnknownColumnError, "filter column 'nope'"),
    "unknown operator": ({"filters": [("id", "~", 1)]}, InvalidArgumentError, "filter operator '~'"),
    "bad filter": ({"filters": [("id", 1)]}, InvalidArgumentError, "a filter is \\(column, op, value\\)"),
    "unknown mode": ({"mode": "fast"}, InvalidArgumentError, "mode must be one of"),
    "incremental without start": ({"mode": "incremental"}, InvalidArgumentError, "needs start"),
    "bad instant": ({"as_of": "yesterday"}, InvalidArgumentError, "as_of must be a Hudi instant"),
    "start on a snapshot": ({"start": "20250101000000000"}, InvalidArgumentError, "start/end apply"),
}


@pytest.mark.parametrize("case", BAD_READS, ids=list(BAD_READS))
def test_bad_reads_name_the_problem(table: HudiTable, case: str) -> None:
    kwargs, error, message = BAD_READS[case]
    with pytest.raises(error, match=message):
        table.read(**kwargs)


BAD_CREATES = {
    "no columns": ({"schema": pa.schema([])}, InvalidArgumentError, "schema has no columns"),
    "reserved column": ({"schema": SCHEMA.append(pa.field("_hoodie_record_key", pa.string()))},
                        SchemaMismatchError, "reserved for Hudi meta fields"),
    "missing key column": ({"record_key": "nope"}, UnknownColumnError, "record key column 'nope'"),
    "float key": ({"schema": SCHEMA.append(pa.field("f", pa.float64())), "record_key": "f"},
                  SchemaMismatchError, "record key column 'f' has type double"),
    "binary partition": ({"schema": SCHEMA.append(pa.field("b", pa.binary())), "partition_fields": "b"},
                         SchemaMismatchError, "partition column 'b' has type binary"),
    "no key": ({"record_key": []}, InvalidArgumentError, "record_key must name at least one column"),
    "bad table type": ({"table_type": "MOR"}, InvalidArgumentError, "table_type must be one of"),
    "bad buckets": ({"buckets": 0}, InvalidArgumentError, "buckets must be a positive int"),
    "bad block format": ({"log_block_format": "orc"}, InvalidArgumentError, "log_block_format 'orc'"),
}


@pytest.mark.parametrize("case", BAD_CREATES, ids=list(BAD_CREATES))
def test_bad_creates_name_the_problem_and_create_nothing(tmp_path: Path, case: str) -> None:
    overrides, error, message = BAD_CREATES[case]
    args = {"schema": SCHEMA, "record_key": "id", "ordering_field": "ts", "partition_fields": "p",
            "buckets": 2, **overrides}
    with pytest.raises(error, match=message):
        HudiTable.create(str(tmp_path / "t"), **args)
    assert not (tmp_path / "t" / ".hoodie" / "hoodie.properties").exists()


def test_creating_over_an_existing_table(table: HudiTable) -> None:
    with pytest.raises(TableExistsError, match="already exists"):
        HudiTable.create(table.path, SCHEMA, record_key="id")


def test_opening_a_path_that_is_not_a_table(tmp_path: Path) -> None:
    with pytest.raises(NotATableError, match="missing .hoodie/hoodie.properties"):
        HudiTable.open(str(tmp_path))


def test_opening_a_table_version_we_cannot_read(table: HudiTable) -> None:
    properties = Path(table.path) / ".hoodie" / "hoodie.properties"
    text = properties.read_text().replace("hoodie.table.version=6", "hoodie.table.version=5")
    os.chmod(properties, 0o644)
    properties.write_text(text)
    with pytest.raises(UnsupportedTableError, match="table version 5"):
        HudiTable.open(table.path)


def test_writing_to_a_table_without_a_bucket_index_is_refused(tmp_path: Path) -> None:
    sample = next(s for s in SAMPLES if s.name == "v6_trips_8i1u")
    path = unpack(sample, tmp_path)
    table = HudiTable.open(str(path))
    before = files(path)
    data = table.read().slice(0, 1)
    with pytest.raises(UnsupportedTableError, match="no bucket index"):
        table.write(data)
    assert files(path) == before
