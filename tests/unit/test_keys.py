"""Record keys, partition paths and bucket ids as Hudi computes them."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memtier.errors import (
    InvalidArgumentError,
    InvalidRecordKeyError,
    InvalidRowError,
    SchemaMismatchError,
)
from memtier.hudi.keys import (
    DEFAULT_PARTITION,
    KeyColumns,
    bucket_ids,
    check_keys,
    partition_paths,
    record_keys,
)
from tests.support.samples import SAMPLES, Sample, unpack


def java_string_hash(text: str) -> int:
    """hudi-format.md section 7, verbatim in spirit: String.hashCode over UTF-16 units."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_bucket(values: list[str | None], buckets: int) -> int:
    h = 1
    for value in values:
        h = (31 * h + (0 if value is None else java_string_hash(value))) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % buckets


# --- record keys -----------------------------------------------------------------------


def test_single_field_keys_are_the_values_as_strings() -> None:
    table = pa.table(
        {
            "i": pa.array([-5, 0, 2**62], pa.int64()),
            "b": [True, False, True],
            "s": pa.array(["a", "b:c", "é"], pa.large_string()),
            "i8": pa.array([1, -2, 3], pa.int8()),
        }
    )
    assert record_keys(table, ["i"]).to_pylist() == ["-5", "0", str(2**62)]
    assert record_keys(table, ["b"]).to_pylist() == ["true", "false", "true"]
    assert record_keys(table, ["s"]).to_pylist() == ["a", "b:c", "é"]
    assert record_keys(table, ["i8"]).type == pa.string()


def test_complex_keys_name_each_field() -> None:
    table = pa.table({"id": [1, 2], "name": ["Alice", ""]})
    keys = record_keys(table, ["id", "name"]).to_pylist()
    assert keys == ["id:1,name:Alice", "id:2,name:__empty__"]


@pytest.mark.parametrize(
    ("table", "fields", "error", "message"),
    [
        (pa.table({"a": [1]}), ["k"], InvalidRecordKeyError, "'k' is missing"),
        (pa.table({"k": [1, None, None]}), ["k"], InvalidRecordKeyError, "'k' is null in row 1"),
        (pa.table({"k": ["x", ""]}), ["k"], InvalidRecordKeyError, "'k' is empty in row 1"),
        (
            pa.table({"k": ["x"], "j": pa.array([None], pa.string())}),
            ["k", "j"],
            InvalidRecordKeyError,
            "'j' is null in row 0",
        ),
        (pa.table({"k": [1.5]}), ["k"], SchemaMismatchError, "'k' has type double"),
        (pa.table({"k": pa.array([1], pa.uint8())}), ["k"], SchemaMismatchError, "'k'"),
        (pa.table({"k": [1]}), [], InvalidRecordKeyError, "no record key"),
    ],
)
def test_bad_keys_are_refused_naming_column_and_row(
    table: pa.Table, fields: list[str], error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        record_keys(table, fields)
    with pytest.raises(error, match=message):
        bucket_ids(table, fields, 4)


KEYED_SAMPLES = {
    "cow/v6_complexkeygen_hivestyle": (["id", "name"], ["byteField", "shortField"], True),
    "cow/v6_nonpartitioned": (["id"], [], True),
    "cow/v6_simplekeygen_nonhivestyle": (["id"], ["byteField"], False),
    "cow/v8_simplekeygen_nonhivestyle": (["id"], ["byteField"], False),
    "mor/parquet/v6_complexkeygen_hivestyle": (["id", "name"], ["byteField", "shortField"], True),
}


@pytest.mark.parametrize(
    "sample",
    [s for s in SAMPLES if any(s.zip_path.endswith(k + ".zip") for k in KEYED_SAMPLES)],
    ids=lambda s: s.id,
)
def test_keys_and_partitions_match_what_spark_wrote(sample: Sample, tmp_path: Path) -> None:
    keys, partitions, hive = next(
        v for k, v in KEYED_SAMPLES.items() if sample.zip_path.endswith(k + ".zip")
    )
    table_dir = unpack(sample, tmp_path)
    for base in table_dir.rglob("*.parquet"):
        if ".hoodie" in base.relative_to(table_dir).parts:
            continue
        data = pq.read_table(base)
        assert record_keys(data, keys).to_pylist() == data.column("_hoodie_record_key").to_pylist()
        paths = partition_paths(data, partitions, hive)
        assert paths.type == pa.dictionary(pa.int32(), pa.string())
        assert paths.to_pylist() == data.column("_hoodie_partition_path").to_pylist()


# --- bucket ids ------------------------------------------------------------------------


def test_bucket_hash_examples_from_the_format_notes() -> None:
    assert java_string_hash("abc") == 96354
    assert java_string_hash("polygenelubricants") == -(2**31)
    table = pa.table({"k": ["abc", "polygenelubricants"]})
    assert bucket_ids(table, ["k"], 1_000_000).tolist() == [96385 % 1_000_000, 31]


def test_buckets_of_ascii_unicode_and_integer_keys() -> None:
    texts = ["", "a", "hello world", "é", "日本語", "emoji 🎉 x", "x" * 1000, "mixé" * 7]
    single = [t for t in texts if t]
    table = pa.table({"k": single})
    assert bucket_ids(table, ["k"], 97).tolist() == [java_bucket([t], 97) for t in single]
    numbers = pa.table({"n": pa.array([0, -1, 123456789, -(2**63)], pa.int64())})
    assert bucket_ids(numbers, ["n"], 8).tolist() == [
        java_bucket([str(v)], 8) for v in numbers.column("n").to_pylist()
    ]
    assert bucket_ids(numbers, ["n"], 8).dtype == np.int32


@pytest.mark.parametrize("dtype", [pa.int8(), pa.int16(), pa.int32(), pa.int64()])
def test_integer_keys_hash_as_their_decimal_strings(dtype: pa.DataType) -> None:
    """Integer keys are hashed without making their strings: the same buckets."""
    info = np.iinfo(dtype.to_pandas_dtype())
    rng = np.random.default_rng(7)
    edges = [info.min, info.min + 1, info.max, 0, -1, 1]
    edges += [s * 10**k + d for k in range(1, 19) for d in (-1, 0) for s in (1, -1)]
    small = [*rng.integers(0, 10**8, 2000), 9_999, 10_000, 10_001, 99_999_999]  # the two-chunk fast path
    values = np.r_[rng.integers(info.min, info.max, 2000, dtype=np.int64, endpoint=True), edges]
    values = values[(values >= info.min) & (values <= info.max)]
    fits = [v for v in small if v <= info.max]
    five_digits_up = [v for v in fits if v >= 10_000]  # the fast path's every-row-has-two-chunks case
    for batch in (values, np.array(fits, dtype=np.int64), np.array(five_digits_up, dtype=np.int64)):
        table = pa.table({"n": pa.array(batch, dtype)})
        for buckets in (1, 16, 1_000_003):
            assert bucket_ids(table, ["n"], buckets).tolist() == [
                java_bucket([str(v)], buckets) for v in batch.tolist()
            ]
    table = pa.table({"n": pa.array(values, dtype)})
    assert bucket_ids(table, ["n"], 16).tolist() == KeyColumns.of(table, ["n"]).bucket_ids(16).tolist()


def test_complex_key_buckets_hash_the_values_hudi_parses_back() -> None:
    table = pa.table({"a": ["x", "", "p"], "b": pa.array([1, 2, 3], pa.int32())})
    assert bucket_ids(table, ["a", "b"], 50).tolist() == [
        java_bucket(["x", "1"], 50),
        java_bucket(["", "2"], 50),  # "__empty__" parses back to ""
        java_bucket(["p", "3"], 50),
    ]


def test_keys_holding_separators_hash_as_hudi_parses_them() -> None:
    stamp = pa.table({"col1": ["val1"], "col2": ["2014-10-22 13:50:42"], "col3": ["val3"]})
    assert bucket_ids(stamp, ["col1", "col2", "col3"], 1000).tolist() == [
        java_bucket(["val1", "2014-10-22 13:50:42", "val3"], 1000)
    ]
    literal = pa.table({"a": ["__null__", "q"], "b": ["r", "__empty__"]})
    assert bucket_ids(literal, ["a", "b"], 1000).tolist() == [
        java_bucket([None, "r"], 1000),
        java_bucket(["q", ""], 1000),
    ]
    single = pa.table({"id": ["a,b", "a:b", "id:7,z:1", "x:1,y:2"]})
    assert bucket_ids(single, ["id"], 1000).tolist() == [
        java_bucket(["a,b"], 1000),
        java_bucket(["a:b"], 1000),
        java_bucket(["7"], 1000),  # parsed as a complex key whose "id" field is 7
        java_bucket(["x:1,y:2"], 1000),  # no "id" field in it: the whole key
    ]


def test_bucket_count_must_be_positive() -> None:
    with pytest.raises(InvalidArgumentError):
        bucket_ids(pa.table({"k": ["a"]}), ["k"], 0)


# --- partition paths -------------------------------------------------------------------


def test_partition_paths_hive_and_plain() -> None:
    table = pa.table(
        {
            "region": ["eu", None, "", "us", "eu"],
            "day": [dt.date(2024, 1, 2), None, dt.date(1969, 12, 31), None, dt.date(2024, 1, 2)],
            "hot": [True, False, None, True, True],
            "n": pa.array([1, -2, 3, None, 1], pa.int16()),
        }
    )
    hive = partition_paths(table, ["region", "day"], True)
    assert hive.to_pylist() == [
        "region=eu/day=2024-01-02",
        f"region={DEFAULT_PARTITION}/day={DEFAULT_PARTITION}",
        f"region={DEFAULT_PARTITION}/day=1969-12-31",
        f"region=us/day={DEFAULT_PARTITION}",
        "region=eu/day=2024-01-02",
    ]
    assert len(hive.dictionary) == 4
    plain = partition_paths(table, ["hot", "n"], False)
    default = DEFAULT_PARTITION
    assert plain.to_pylist() == ["true/1", "false/-2", f"{default}/3", f"true/{default}", "true/1"]
    assert partition_paths(table, ["region"], False).to_pylist()[1:3] == [DEFAULT_PARTITION] * 2
    assert len(partition_paths(table, ["region"], False).dictionary) == 3  # null and "" share one


def test_unpartitioned_tables_have_empty_paths() -> None:
    paths = partition_paths(pa.table({"a": [1, 2]}), [], True)
    assert paths.to_pylist() == ["", ""]


def test_bad_partition_values_are_refused() -> None:
    with pytest.raises(InvalidRowError, match="'p' holds 'a/b' in row 1"):
        partition_paths(pa.table({"p": ["x", "a/b"]}), ["p"], True)
    with pytest.raises(SchemaMismatchError, match="'p' has type double"):
        partition_paths(pa.table({"p": [1.5]}), ["p"], True)
    with pytest.raises(SchemaMismatchError, match="'q' is missing"):
        partition_paths(pa.table({"p": [1]}), ["q"], True)


@pytest.mark.parametrize("table, fields", [
    (pa.table({"id": pa.array([1, None], pa.int64())}), ["id"]),
    (pa.table({"id": ["a", ""]}), ["id"]),
    (pa.table({"id": pa.array(["a", ""], pa.large_string())}), ["id"]),
    (pa.table({"id": [1.5, 2.5]}), ["id"]),
    (pa.table({"id": [1, 2]}), ["key"]),
    (pa.table({"id": [1, 2]}), []),
    (pa.table({"a": [1, 2], "b": ["x", None]}), ["a", "b"]),
])
def test_checking_keys_refuses_what_making_them_refuses(table: pa.Table, fields: list[str]) -> None:
    with pytest.raises(Exception) as made:
        KeyColumns.of(table, fields)
    with pytest.raises(type(made.value), match=re.escape(str(made.value))):
        check_keys(table, fields)


@pytest.mark.parametrize("table", [
    pa.table({"id": pa.array([1, 0, -5], pa.int32())}), pa.table({"id": [True, False]}),
    pa.table({"id": ["a", "b"]}), pa.table({"id": pa.array(["a", "b"]).dictionary_encode()}),
])
def test_checking_keys_passes_what_making_them_passes(table: pa.Table) -> None:
    KeyColumns.of(table, ["id"])
    check_keys(table, ["id"])
