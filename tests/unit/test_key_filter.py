"""Key filters (Bloom filters of base files' key columns, memtier.hudi.keyfilter): never a
false negative, about 1% false positives, footer entries that round-trip, and malformed
or foreign entries that filter nothing."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from memtier.hudi.keyfilter import FOOTER_PREFIX, KeyBloom, footer_filters, key_filter_metadata

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def round_trip(bloom: KeyBloom) -> KeyBloom:
    decoded = KeyBloom.decode(bloom.entry())
    assert decoded is not None
    return decoded


@settings(max_examples=60, deadline=None)
@given(st.lists(INT64, min_size=1, max_size=300), st.sampled_from([pa.int64(), pa.int32(), pa.int8()]))
def test_every_integer_written_is_held(values, kind) -> None:
    values = [v for v in values if pa.scalar(0, kind).type.bit_width == 64 or -128 <= v <= 127]
    if not values:
        return
    bloom = round_trip(KeyBloom.of(pa.array(values, kind)))
    assert all(bloom.may_hold(pa.array([v], kind)) for v in values)
    assert bloom.may_hold(pa.array(values, kind))
    assert bloom.may_hold(pa.array([None, values[0]], kind))  # a null beside it changes nothing


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=12), min_size=1, max_size=200))
def test_every_string_written_is_held_ascii_or_not(values) -> None:
    bloom = round_trip(KeyBloom.of(pa.array(values, pa.string())))
    assert all(bloom.may_hold(pa.array([v])) for v in values)
    large = round_trip(KeyBloom.of(pa.array(values, pa.large_string())))
    assert all(large.may_hold(pa.array([v], pa.large_string())) for v in values)


def test_about_one_percent_of_absent_keys_pass() -> None:
    bloom = round_trip(KeyBloom.of(pa.array(np.arange(0, 500_000, 2, dtype=np.int64))))
    absent = np.arange(1, 40_001, 2, dtype=np.int64)
    passed = sum(bloom.may_hold(pa.array([k])) for k in absent.tolist())
    assert passed / len(absent) < 0.02
    strings = round_trip(KeyBloom.of(pa.array([f"user-{i}" for i in range(100_000)])))
    passed = sum(strings.may_hold(pa.array([f"user-{i}"])) for i in range(100_000, 110_000))
    assert passed / 10_000 < 0.02


def test_probing_a_few_values_one_by_one_answers_as_the_array_probe() -> None:
    """A probe of up to eight values tests them one at a time in Python; more go through
    the array steps: both must set the same bits (absent keys, false positives included)."""
    bloom = round_trip(KeyBloom.of(pa.array(np.arange(0, 20_000, 2, dtype=np.int64))))
    strings = round_trip(KeyBloom.of(pa.array([f"user-{i}" for i in range(0, 5_000, 2)])))
    for k in range(0, 4_000):
        assert bloom.may_hold(pa.array([k])) == bloom.may_hold(pa.array([k] * 9)), k
        assert bloom.may_hold(pa.array([k, k + 1])) == bloom.may_hold(pa.array([k, k + 1] * 5)), k
    for i in range(0, 1_000):
        one = pa.array([f"user-{i}"])
        assert strings.may_hold(one) == strings.may_hold(pa.array([f"user-{i}"] * 9)), i


def test_footer_entries_for_key_columns_only() -> None:
    table = pa.table({"id": [1, 2], "name": ["a", "b"], "ok": [True, False], "v": [0.5, 1.5]})
    entries = key_filter_metadata(table, ["id", "name", "ok", "missing"])
    assert sorted(entries) == [FOOTER_PREFIX + "id", FOOTER_PREFIX + "name"]  # booleans: no filter
    found = footer_filters({k.encode(): v.encode() for k, v in entries.items()} | {b"other": b"x"})
    assert sorted(found) == ["id", "name"]
    assert found["id"].may_hold(pa.array([2])) and found["name"].may_hold(pa.array(["a"]))


def test_malformed_entries_filter_nothing() -> None:
    entry = KeyBloom.of(pa.array([1, 2, 3])).entry()
    for bad in ["", "!!!!", entry[:-4], entry + "AAAA", "AQcAAAAAAAAAAAAA" + entry[16:],  # version 1, size 0
                "AgcAAAAAAAA" + entry[11:]]:  # version 2
        assert KeyBloom.decode(bad) is None, bad
    assert footer_filters({(FOOTER_PREFIX + "id").encode(): b"garbage"}) == {}
    assert footer_filters(None) == {}
