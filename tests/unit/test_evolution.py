"""Schema evolution rules: what a table's schema may become, and rows read up to it."""

from __future__ import annotations

import decimal

import pyarrow as pa
import pytest

from memtier.errors import SchemaEvolutionError, UnknownColumnError
from memtier.hudi.evolution import Change, Roles, evolve, merge, project, widening_problem

BASE = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    ("ts", pa.int32()),
    ("city", pa.string()),
    ("n", pa.int32()),
    ("price", pa.decimal128(10, 2)),
    ("st", pa.struct([("x", pa.int32())])),
    ("tags", pa.list_(pa.int32())),
])
ROLES = Roles(record_key=("id",), partition=("city",), ordering="ts")


@pytest.mark.parametrize(("old", "new"), [
    (pa.int8(), pa.int16()), (pa.int32(), pa.int64()), (pa.int32(), pa.float64()), (pa.int64(), pa.float32()),
    (pa.float32(), pa.float64()), (pa.int32(), pa.string()), (pa.int64(), pa.string()),
    (pa.string(), pa.binary()), (pa.decimal128(10, 2), pa.decimal128(11, 2)),
    (pa.struct([("x", pa.int32())]), pa.struct([("x", pa.int64()), ("y", pa.string())])),
    (pa.list_(pa.int32()), pa.list_(pa.int64())),
    (pa.map_(pa.string(), pa.int32()), pa.map_(pa.string(), pa.float64())),
])
def test_widenings(old: pa.DataType, new: pa.DataType) -> None:
    assert widening_problem(old, new) is None


@pytest.mark.parametrize(("old", "new", "why"), [
    (pa.int64(), pa.int32(), "narrows"),
    (pa.float64(), pa.float32(), "narrows"),
    (pa.string(), pa.int64(), "narrows"),
    (pa.binary(), pa.string(), "narrows"),
    (pa.float64(), pa.string(), "not a widening"),
    (pa.bool_(), pa.int32(), "not a widening"),
    (pa.decimal128(10, 2), pa.decimal128(12, 2), "5 bytes"),
    (pa.decimal128(10, 2), pa.decimal128(11, 3), "not a widening"),
    (pa.struct([("x", pa.int32()), ("y", pa.int32())]), pa.struct([("y", pa.int32()), ("x", pa.int32())]), "in order"),
])
def test_not_widenings(old: pa.DataType, new: pa.DataType, why: str) -> None:
    problem = widening_problem(old, new)
    assert problem is not None and why in problem


def test_add_at_the_end_and_nested() -> None:
    schema, found = evolve(BASE, [pa.field("note", pa.string()), pa.field("st.y", pa.string())], roles=ROLES)
    assert schema.names == [*BASE.names, "note"]
    assert schema.field("st").type == pa.struct([("x", pa.int32()), ("y", pa.string())])
    assert [str(c) for c in found] == ["added st.y string", "added note string"]


def test_widen_nested_and_top_level() -> None:
    schema, found = evolve(BASE, widen={"n": pa.int64(), "st.x": pa.float64(), "ts": pa.int64()}, roles=ROLES)
    assert schema.field("n").type == pa.int64()
    assert schema.field("st").type == pa.struct([("x", pa.float64())])
    assert {c.path: (c.old, c.new) for c in found} == {
        "ts": (pa.int32(), pa.int64()), "n": (pa.int32(), pa.int64()), "st.x": (pa.int32(), pa.float64()),
    }


@pytest.mark.parametrize(("add", "widen", "message"), [
    ([pa.field("id", pa.string())], {}, "already exists"),
    ([pa.field("req", pa.string(), nullable=False)], {}, "non-null"),
    ([pa.field("_hoodie_is_deleted", pa.bool_())], {}, "reserved"),
    ([pa.field("_hoodie_commit_time", pa.string())], {}, "reserved"),
    ([pa.field("n.y", pa.string())], {}, "not a struct"),
    ([], {"n": pa.int16()}, "narrows"),
    ([], {"id": pa.string()}, "record-key"),
    ([], {"city": pa.binary()}, "partition"),
    ([], {"ts": pa.string()}, "among numbers"),
    ([], {"price": pa.decimal128(20, 2)}, "bytes"),
    ([pa.field("u", pa.uint64())], {}, "Avro"),
])
def test_refused_with_the_reason(add: list[pa.Field], widen: dict[str, pa.DataType], message: str) -> None:
    with pytest.raises(SchemaEvolutionError, match=message):
        evolve(BASE, add, widen, roles=ROLES)


def test_unknown_column() -> None:
    with pytest.raises(UnknownColumnError, match="'nope'"):
        evolve(BASE, widen={"nope": pa.int64()})
    with pytest.raises(UnknownColumnError, match="'nope'"):
        evolve(BASE, [pa.field("nope.x", pa.int64())])


def test_merge_takes_new_columns_and_wider_types_only() -> None:
    incoming = pa.schema([
        ("n", pa.int64()),  # wider: taken
        ("id", pa.int64()),  # as it is
        ("ts", pa.int16()),  # narrower: kept (cast up at the write)
        ("st", pa.struct([("x", pa.int32()), ("z", pa.bool_())])),  # a nested field added
        ("extra", pa.dictionary(pa.int32(), pa.string())),  # added, as its value type
        ("_hoodie_is_deleted", pa.bool_()),  # Hudi's delete flag: not a column to add
    ])
    merged, found = merge(BASE, incoming, ROLES)
    assert merged.names == [*BASE.names, "extra"]
    assert merged.field("n").type == pa.int64()
    assert merged.field("ts").type == pa.int32()
    assert merged.field("extra").type == pa.string() and merged.field("extra").nullable
    assert [str(c) for c in found] == ["widened n int32 -> int64", "added st.z bool", "added extra string"]


def test_merge_of_a_fitting_batch_changes_nothing() -> None:
    assert merge(BASE, pa.schema([("id", pa.int64()), ("n", pa.int8())])) == (BASE, [])


def test_merge_turns_no_number_column_into_text() -> None:
    """Strings for a number column are cast by the write (or refused), not taken to widen
    it: turning a column into strings takes an alter."""
    assert merge(BASE, pa.schema([("n", pa.string()), ("ts", pa.string())]), ROLES) == (BASE, [])


def test_merge_leaves_key_and_partition_types_to_the_write() -> None:
    """A key written as int64 into an int32 key column is cast (or refused) by the write."""
    current = pa.schema([("id", pa.int32()), ("city", pa.int32())])
    assert merge(current, pa.schema([("id", pa.int64()), ("city", pa.string())]), Roles(("id",), ("city",))) == (
        current, [])


def test_merge_refuses_what_the_table_cannot_take() -> None:
    with pytest.raises(SchemaEvolutionError, match="Avro"):
        merge(BASE, pa.schema([("u", pa.uint64())]))
    with pytest.raises(SchemaEvolutionError, match="only nulls"):
        merge(BASE, pa.schema([("empty", pa.null())]))


def test_project_reads_old_rows_up_to_the_new_schema() -> None:
    old = pa.table({
        "id": [1, 2], "ts": pa.array([1, 2], pa.int32()), "city": ["a", "b"], "n": pa.array([3, None], pa.int32()),
        "price": pa.array([decimal.Decimal("1.50"), None], pa.decimal128(10, 2)),
        "st": pa.array([{"x": 1}, None], pa.struct([("x", pa.int32())])),
        "tags": pa.array([[1], []], pa.list_(pa.int32())),
    })
    new, _ = evolve(BASE, [pa.field("note", pa.string()), pa.field("st.y", pa.string())],
                    {"n": pa.string(), "price": pa.decimal128(11, 2), "tags": pa.list_(pa.int64())})
    read = project(old, new)
    assert read.schema == new
    assert read.to_pylist() == [
        {"id": 1, "ts": 1, "city": "a", "n": "3", "price": decimal.Decimal("1.50"), "st": {"x": 1, "y": None},
         "tags": [1], "note": None},
        {"id": 2, "ts": 2, "city": "b", "n": None, "price": None, "st": None, "tags": [], "note": None},
    ]
    batch = project(old.to_batches()[0], new)
    assert isinstance(batch, pa.RecordBatch) and batch.schema == new


def test_change_describes_itself() -> None:
    assert str(Change("a.b", pa.int64(), pa.int32())) == "widened a.b int32 -> int64"
