"""memtier.tableserver.keyindex: a block's key index answers exactly what a pass over
every frame answers, read after read as frames are added (integer columns kept as sorted
runs, merged as they grow; string columns compared whole), for any integer type and
range, and only over the frames a read was given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from memtier.tableserver import keyindex
from memtier.tableserver.keyindex import KeyIndex, _sorted, _SortedRuns


@dataclass
class _Frame:
    batch: pa.RecordBatch

    def column(self, name: str) -> pa.Array:
        return self.batch.column(name)


def _brute_force(frames: list[_Frame], count: int, pinned: dict[str, list[Any]]) -> dict[int, list[int]]:
    found = {}
    for i, frame in enumerate(frames[:count]):
        rows = [r for r in range(frame.batch.num_rows)
                if all(frame.batch.column(c)[r].as_py() in values for c, values in pinned.items())]
        if rows:
            found[i] = rows
    return found


def _answer(index: KeyIndex, frames: list[_Frame], count: int, pinned: dict[str, list[Any]]) -> dict[int, list[int]]:
    got = index.rows(frames, count, pinned)
    assert got is not None
    return {i: rows.tolist() for i, rows in got.items()}


@pytest.mark.parametrize("scans", [1, 3, 64])
@pytest.mark.parametrize("kind", [pa.int64(), pa.int32(), pa.uint64(), pa.int8(), pa.uint16()])
def test_reads_between_appends_find_exactly_the_rows_holding_the_values(
    kind: pa.DataType, scans: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyindex, "_SCANS_BEFORE_SORT", scans)  # runs, a tail, or both
    rng = np.random.default_rng(7)
    info = np.iinfo(kind.to_pandas_dtype())
    # a narrow range (many repeats) and the type's extremes (no room to pack positions)
    pool = np.concatenate([rng.integers(max(info.min, -50), min(info.max, 50), 40).astype(info.dtype),
                           np.array([info.min, info.max], info.dtype)])
    schema = pa.schema([("id", kind), ("s", pa.string())])
    index = KeyIndex(schema)
    frames: list[_Frame] = []
    for step in range(60):
        values = rng.choice(pool, size=int(rng.integers(1, 40)))
        frames.append(_Frame(pa.record_batch([pa.array(values, kind), pa.array([f"k{v % 7}" for v in values])],
                                             schema=schema)))
        if step % 3:
            continue  # several frames added between reads: runs of different sizes merge
        wanted = [int(v) for v in rng.choice(pool, size=int(rng.integers(1, 4)))]
        assert _answer(index, frames, len(frames), {"id": wanted}) == _brute_force(frames, len(frames), {"id": wanted})
        both = {"id": wanted, "s": ["k1", "k3"]}
        assert _answer(index, frames, len(frames), both) == _brute_force(frames, len(frames), both)
    runs = index._columns["id"].sorted.runs
    assert (len(runs) > 0) == (scans < 40)  # 40 reads of "id": its tail was sorted into runs unless 64 are needed
    assert len(runs) <= 2 * int(np.log2(sum(f.batch.num_rows for f in frames)))


def test_a_read_given_fewer_frames_than_indexed_sees_only_those() -> None:
    schema = pa.schema([("id", pa.int64())])
    frames = [_Frame(pa.record_batch([pa.array([1, 2, 1], pa.int64())], schema=schema)) for _ in range(4)]
    index = KeyIndex(schema)
    assert _answer(index, frames, 4, {"id": [1]}) == {i: [0, 2] for i in range(4)}
    # a read that took the frames list when it held two (a concurrent read indexed all four)
    assert _answer(index, frames, 2, {"id": [1]}) == {0: [0, 2], 1: [0, 2]}
    assert _answer(index, frames, 0, {"id": [1]}) == {}


def test_a_value_that_does_not_fit_the_column_leaves_the_frames_to_the_caller() -> None:
    schema = pa.schema([("id", pa.int8())])
    frames = [_Frame(pa.record_batch([pa.array([1, 2], pa.int8())], schema=schema))]
    index = KeyIndex(schema)
    assert index.rows(frames, 1, {"id": [300]}) is None
    assert index.rows(frames, 1, {"id": ["1"]}) is None
    assert index.rows(frames, 1, {"id": [True]}) is None
    assert _answer(index, frames, 1, {"id": [None, 2]}) == {0: [1]}


@pytest.mark.parametrize("values", [
    np.array([5, 3, 5, 1, 3], np.int64),
    np.array([np.iinfo(np.int64).min, 0, np.iinfo(np.int64).max, 5, 5], np.int64),
    np.array([2**64 - 1, 0, 2**63, 5, 0], np.uint64),
    np.array([2**64 - 1, 2**64 - 3, 2**64 - 2], np.uint64),
    np.array([-128, 127, 0, -128], np.int8),
    np.zeros(0, np.int64),
])
def test_sorting_packs_positions_only_where_they_fit_and_is_stable(values: np.ndarray) -> None:
    ordered, positions = _sorted(values)
    expected = np.argsort(values, kind="stable")
    assert positions.tolist() == expected.tolist()
    assert ordered.dtype == values.dtype and ordered.tolist() == values[expected].tolist()


def test_the_tail_is_sorted_into_a_run_once_enough_reads_compared_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyindex, "_SCANS_BEFORE_SORT", 3)
    runs = _SortedRuns()
    runs.extend([np.array([5, 1, 5], np.int64), np.array([2], np.int64)])
    assert runs.rows(np.array([5])).tolist() == [0, 2]
    assert runs.rows(np.array([2, 1])).tolist() == [1, 3]
    assert not runs.runs and runs.tail_first == 0
    runs.extend([np.array([5], np.int64)])  # row 4
    assert runs.rows(np.array([5, 5])).tolist() == [0, 2, 4]  # the third read: sorted after it answered
    assert len(runs.runs) == 1 and not runs.tail and runs.tail_first == 5
    runs.extend([np.array([1, 5], np.int64)])  # rows 5 and 6: the new tail
    assert runs.rows(np.array([5])).tolist() == [0, 2, 4, 6]
    assert runs.rows(np.array([1])).tolist() == [1, 5]


def test_runs_stay_few_and_sorted_as_they_merge() -> None:
    rng = np.random.default_rng(3)
    runs = _SortedRuns()
    total = 0
    for size in rng.integers(1, 500, 200):
        runs.add_run(rng.integers(0, 10**12, int(size)), total)
        total += int(size)
        sizes = [len(v) for v, _ in runs.runs]
        assert all(a > 2 * b for a, b in zip(sizes, sizes[1:], strict=False))  # each more than twice the next
    assert sum(len(v) for v, _ in runs.runs) == total
    assert all(np.all(v[1:] >= v[:-1]) for v, _ in runs.runs)
    assert sorted(np.concatenate([r for _, r in runs.runs]).tolist()) == list(range(total))
