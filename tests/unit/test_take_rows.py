"""take_rows: the rows at given positions, as Arrow's checked take gives them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from memtier.hudi.rows import take_rows


def _table() -> pa.Table:
    rng = np.random.default_rng(7)
    keys = rng.permutation(1000)
    names = [None if k % 7 == 0 else f"n{k}" for k in keys.tolist()]
    first = pa.table({"k": keys, "name": names, "v": rng.random(1000)})
    return pa.concat_tables([first.slice(0, 400), first.slice(400)])  # two chunks


def test_takes_the_rows_of_tables_and_batches_in_the_given_order() -> None:
    table = _table()
    order = np.argsort(table.column("k").to_numpy(), kind="stable")
    assert take_rows(table, order).equals(table.take(pa.array(order)))
    batch = table.combine_chunks().to_batches()[0]
    subset = np.flatnonzero(table.column("k").to_numpy() % 3 == 0)[::-1].copy()
    taken = take_rows(batch, subset)
    assert isinstance(taken, pa.RecordBatch)
    assert taken.equals(batch.take(pa.array(subset)))
    assert take_rows(batch, np.array([], dtype=np.int64)).num_rows == 0
