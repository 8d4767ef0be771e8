"""Which filters may run before the merge, which buckets equalities on the key pin, and
filtering by compute kernels as the expression would."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtier.hudi import HudiTable
from memtier.hudi.cache import SliceCache
from memtier.hudi.filters import (
    MAX_KEY_COMBINATIONS,
    filtered,
    key_buckets,
    key_filters,
    pinned_values,
    to_expression,
)
from memtier.hudi.keys import KeyColumns
from memtier.hudi.reader import read_table

SCHEMA = pa.schema([("tenant", pa.string()), ("id", pa.int64()), ("v", pa.string())])


def buckets_of(rows: dict[str, list], key: list[str], n: int) -> set[int]:
    table = pa.table({k: pa.array(v, SCHEMA.field(k).type) for k, v in rows.items()})
    return set(KeyColumns.of(table, key).bucket_ids(n).tolist())


def test_only_filters_on_key_columns_run_before_the_merge() -> None:
    filters = [("id", "=", 1), ("v", "=", "x"), ("tenant", "in", ["a"])]
    assert key_filters(filters, ["tenant", "id"]) == [("id", "=", 1), ("tenant", "in", ["a"])]


def test_equalities_on_a_one_column_key_pin_its_buckets() -> None:
    assert key_buckets([("id", "=", 7)], ["id"], SCHEMA, 16) == buckets_of({"id": [7]}, ["id"], 16)
    ids = list(range(50))
    assert key_buckets([("id", "in", ids)], ["id"], SCHEMA, 16) == buckets_of({"id": ids}, ["id"], 16)


def test_a_composite_key_pins_buckets_only_when_every_column_is_pinned() -> None:
    key = ["tenant", "id"]
    assert key_buckets([("id", "=", 7)], key, SCHEMA, 8) is None
    pinned = key_buckets([("tenant", "in", ["a", "b"]), ("id", "in", [1, 2])], key, SCHEMA, 8)
    every_pair = {"tenant": ["a", "a", "b", "b"], "id": [1, 2, 1, 2]}
    assert pinned == buckets_of(every_pair, key, 8)


def test_contradicting_equalities_pin_no_bucket() -> None:
    assert key_buckets([("id", "=", 1), ("id", "in", [2, 3])], ["id"], SCHEMA, 4) == set()


def test_ranges_values_of_another_type_and_huge_products_pin_nothing() -> None:
    assert key_buckets([("id", ">", 1)], ["id"], SCHEMA, 4) is None
    assert key_buckets([("id", "=", "seven")], ["id"], SCHEMA, 4) is None
    many = list(range(MAX_KEY_COMBINATIONS + 1))
    assert key_buckets([("id", "in", many)], ["id"], SCHEMA, 4) is None


def test_pinned_values_intersect_per_column_and_null_matches_nothing() -> None:
    filters = [("id", "in", [1, 2, 3]), ("id", "=", 2), ("v", "=", None), ("id", ">", 0)]
    assert pinned_values(filters) == {"id": [2], "v": []}


# -- filtered: compute kernels, as the expression would keep rows ---------------------------
_OPS = ["=", "==", "!=", "<", "<=", ">", ">=", "in", "not in"]
_TABLE = pa.table({
    "n": pa.array([1, None, 3, 4, None, 6], pa.int64()),
    "s": pa.array(["a", "b", None, "d", "a", ""], pa.string()),
    "d": pa.array([0, 1, None, 3, 4, 5], pa.int32()).cast(pa.date32()),
})
_VALUES = {"n": [None, 0, 1, 3, 6, 2.5, "3"], "s": [None, "a", "", "z", 1], "d": ["1970-01-02", 3]}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(_VALUES)), st.sampled_from(_OPS), st.data()),
                min_size=1, max_size=3))
def test_filtered_keeps_the_rows_the_expression_keeps(picked) -> None:
    filters = []
    for column, op, data in picked:
        values = _VALUES[column]
        value = (data.draw(st.lists(st.sampled_from(values), min_size=1, max_size=3)) if op in ("in", "not in")
                 else data.draw(st.sampled_from(values)))
        filters.append((column, op, value))
    try:
        expected = _TABLE.filter(to_expression(filters))
    except (pa.ArrowException, TypeError, ValueError) as e:
        with pytest.raises(type(e)):
            filtered(_TABLE, filters)
        return
    assert filtered(_TABLE, filters).equals(expected), filters


def test_an_empty_in_list_keeps_nothing_and_an_empty_not_in_list_everything() -> None:
    # (the expression refuses a list whose values have no type)
    assert filtered(_TABLE, [("s", "in", [])]).num_rows == 0
    assert filtered(_TABLE, [("n", "not in", [])]).equals(_TABLE)


def test_a_partition_filtered_read_through_the_cache_equals_one_without_it(tmp_path) -> None:
    schema = pa.schema([("key", pa.int64()), ("ts", pa.int64()), ("city", pa.string())])
    table = HudiTable.create(str(tmp_path / "t"), schema, record_key="key", ordering_field="ts",
                             partition_fields="city", buckets=2)
    cache = SliceCache()

    def read(filters: list) -> list[tuple]:
        cached = read_table(table.meta, filters=filters, cache=cache).sort_by("key")
        fresh = read_table(table.meta, filters=filters).sort_by("key")
        assert cached.equals(fresh), filters
        return list(zip(*(cached.column(c).to_pylist() for c in ("key", "city")), strict=True))

    table.write(pa.table({"key": [1, 2, 3], "ts": [1, 1, 1], "city": ["oslo", "rome", "oslo"]}, schema=schema))
    assert read([("city", "==", "oslo")]) == [(1, "oslo"), (3, "oslo")]
    assert read([("city", "in", ["rome", "paris"]), ("key", "==", 2)]) == [(2, "rome")]
    assert read([("city", "==", "paris")]) == []
    table.write(pa.table({"key": [4], "ts": [1], "city": ["paris"]}, schema=schema))  # a new partition
    assert read([("city", "==", "paris")]) == [(4, "paris")]
    assert read([("city", "!=", "oslo")]) == [(2, "rome"), (4, "paris")]
