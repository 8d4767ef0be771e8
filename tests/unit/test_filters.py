"""Which filters may run before the merge, and which buckets equalities on the key pin."""

from __future__ import annotations

import pyarrow as pa

from memtier.hudi.filters import MAX_KEY_COMBINATIONS, key_buckets, key_filters, pinned_values
from memtier.hudi.keys import KeyColumns

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
