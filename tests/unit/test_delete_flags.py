"""The delete flags a write gets when it has none: all False, and only as large as the write."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from memtier.hudi.deletes import DELETE_FLAG, with_delete_flags


def test_flags_of_a_small_write_after_a_large_one_hold_only_its_own_rows() -> None:
    with_delete_flags(pa.table({"k": np.arange(1_000_000)}))
    small = with_delete_flags(pa.table({"k": np.arange(1_000)}))
    flags = small.column(DELETE_FLAG).chunk(0)
    assert flags.to_pylist() == [False] * 1_000
    # a table server counts a write's memory by its buffers' whole size
    assert flags.get_total_buffer_size() == pa.array(np.zeros(1_000, dtype=bool)).get_total_buffer_size()


def test_writes_of_the_same_size_get_equal_flags() -> None:
    first = with_delete_flags(pa.table({"k": np.arange(10)}))
    again = with_delete_flags(pa.table({"k": np.arange(10, 20)}))
    assert again.column(DELETE_FLAG).to_pylist() == first.column(DELETE_FLAG).to_pylist() == [False] * 10
