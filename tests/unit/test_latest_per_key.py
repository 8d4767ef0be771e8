"""Pre-combine (`latest_per_key`): each key's winning version, against a brute force.

Integer keys take the numpy path (dense keys that never repeat told by counting them,
otherwise one sort of packed (key, row) values, or a stable argsort where they do not
fit); other keys, null or floating-point ordering values, or positions out of order take
Arrow's sort. Both must pick what Hudi's pre-combine picks: the greatest
ordering value (a null one losing), then the latest position; winners in key order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtier.hudi.merge import latest_per_key


def brute_force(keys: list[Any], ordering: list[int | None] | None, positions: list[int]) -> list[int] | None:
    """Row of each key's winner, keys ascending; None when no key repeats."""
    if len(set(keys)) == len(keys):
        return None
    best: dict[Any, int] = {}
    for row, key in enumerate(keys):
        def rank(r: int) -> tuple[bool, int, int]:
            value = None if ordering is None else ordering[r]
            return (value is not None, value or 0, positions[r])
        if key not in best or rank(row) > rank(best[key]):
            best[key] = row
    return [best[k] for k in sorted(best)]


def check(keys: pa.Array, ordering: pa.Array | None, positions: np.ndarray) -> None:
    got = latest_per_key(keys, ordering, positions)
    want = brute_force(keys.to_pylist(), None if ordering is None else ordering.to_pylist(), positions.tolist())
    assert (None if got is None else got.tolist()) == want


SPANS = st.sampled_from([1, 3, 50, 2**40, 2**62])


ORDERING_TYPES = st.sampled_from([pa.int64(), pa.int16(), pa.timestamp("us"), pa.date32(), pa.float64()])


@settings(max_examples=300, deadline=None)
@given(data=st.data(), span=SPANS, ordered=st.booleans(), nulls=st.booleans(),
       key_type=st.sampled_from([pa.int64(), pa.int32(), pa.uint64(), pa.string()]), ordering_type=ORDERING_TYPES)
def test_winners_match_brute_force(data: st.DataObject, span: int, ordered: bool, nulls: bool,
                                   key_type: pa.DataType, ordering_type: pa.DataType) -> None:
    n = data.draw(st.integers(0, 40))
    low = 0 if key_type == pa.uint64() else -(min(span, 2**31 - 1) if key_type == pa.int32() else span)
    high = min(span, 2**31 - 1) if key_type == pa.int32() else span
    values = data.draw(st.lists(st.integers(low, high), min_size=n, max_size=n))
    keys = pa.array([str(v) for v in values] if key_type == pa.string() else values, key_type)
    ordering = None
    if ordered:
        small = ordering_type in (pa.int16(), pa.date32())  # (days: within datetime's years)
        drawn = data.draw(st.lists(st.integers(-3, 3) | st.integers(-(2**14), 2**14) if small
                                   else st.integers(-3, 3) | st.integers(-(2**52), 2**52), min_size=n, max_size=n))
        if nulls and n:
            drawn[data.draw(st.integers(0, n - 1))] = None
        as_int = pa.array(drawn, pa.int32() if ordering_type == pa.date32() else pa.int64())
        ordering = as_int.cast(ordering_type)
    steps = data.draw(st.lists(st.integers(1, 2**33), min_size=n, max_size=n))
    check(keys, ordering, np.cumsum(np.array(steps, dtype=np.int64)))


def test_positions_out_of_order_still_decide_ties() -> None:
    keys = pa.array([7, 7, 7, 8], pa.int64())
    check(keys, pa.array([1, 1, 0, 5], pa.int64()), np.array([5, 2, 9, 1], dtype=np.int64))
    check(keys, None, np.array([5, 2, 9, 1], dtype=np.int64))


@pytest.mark.parametrize("ordering_type", [pa.int64(), pa.timestamp("ms")])
def test_integer_keys_do_not_sort_in_arrow(monkeypatch: pytest.MonkeyPatch, ordering_type: pa.DataType) -> None:
    """The numpy path serves integer keys (both ways of grouping them), with integer or
    timestamp ordering values."""
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("Arrow's sort used for integer keys")

    monkeypatch.setattr(pc, "sort_indices", refuse)
    rng = np.random.default_rng(3)
    for span in (1_000, 2**62):  # packed (key, row) sort; stable argsort
        keys = pa.array(rng.integers(-span, span, 5_000) // 7 * 7, pa.int64())
        keys = pa.concat_arrays([keys, keys])  # every key at least twice
        ordering = pa.array(rng.integers(0, 4, len(keys)), pa.int64()).cast(ordering_type)
        check(keys, ordering, np.arange(len(keys), dtype=np.int64))
