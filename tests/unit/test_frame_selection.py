"""A block's frame that is a selection of its write's batch gives the same rows, columns and
key ranges as a frame owning those rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from memtier.tableserver.block import Frame

BATCH = pa.record_batch({"id": pa.array(range(100, 110), pa.int64()), "s": [f"v{i}" for i in range(10)]})
POSITIONS = np.array([1, 4, 5, 9], np.int32)


def test_a_selection_frame_reads_as_the_rows_it_selects() -> None:
    selected = Frame(0, bytes(16), 0, BATCH, POSITIONS)
    owned = Frame(0, bytes(16), 0, BATCH.take(pa.array(POSITIONS)))
    assert selected.num_rows == owned.num_rows == 4
    assert selected.batch.equals(owned.batch)
    assert selected.column("s").equals(owned.column("s"))
    for rows in (None, np.array([0, 3]), np.array([1, 2])):
        assert selected.rows_of(["s"], rows).equals(owned.rows_of(["s"], rows))
    assert selected.value_range("id") == owned.value_range("id") == (101, 109)
    assert not selected.may_hold("id", [100, 110]) and selected.may_hold("id", [105])
