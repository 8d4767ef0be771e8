"""A client's file-group order (memtier.hudi.routing.file_group_order) is the order a
table server groups a batch's rows in: given the reordered batch, or the part of it one
server owns, the server finds each file group's rows in one run, in order, and keeps the
batch as it came."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtier.hudi import HudiTable
from memtier.hudi.routing import file_group_order, file_groups

SCHEMA = pa.schema([("k", pa.int64()), ("s", pa.string()), ("city", pa.string()), ("ts", pa.int64())])
CITY = st.sampled_from(["ams", "ber", "", "lis", None])


@pytest.fixture(scope="module")
def metas(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("order")
    return {
        (key, partitioned, buckets): HudiTable.create(
            str(root / f"{key}-{partitioned}-{buckets}"), SCHEMA, record_key=key, ordering_field="ts",
            partition_fields="city" if partitioned else None, buckets=buckets).meta
        for key in ("k", "s") for partitioned in (False, True) for buckets in (1, 3, 16)
    }


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(-(2**62), 2**62), st.text(min_size=1, max_size=6), CITY),
                     min_size=1, max_size=60),
       key=st.sampled_from(["k", "s"]), partitioned=st.booleans(), buckets=st.sampled_from([1, 3, 16]),
       owned=st.sets(st.integers(0, 15)))
def test_the_server_finds_each_file_group_in_one_run_in_order(metas, rows, key, partitioned, buckets,
                                                             owned) -> None:
    meta = metas[(key, partitioned, buckets)]
    table = pa.table({"k": [r[0] for r in rows], "s": [r[1] for r in rows], "city": [r[2] for r in rows],
                      "ts": list(range(len(rows)))}, schema=SCHEMA)
    order = file_group_order(table, [key], ["city"] if partitioned else [], buckets)
    sent = table if order is None else table.take(pa.array(order))
    served = file_groups(meta, sent)
    assert np.array_equal(np.concatenate([r for _, _, r in served]), np.arange(len(rows)))
    # the same file groups as the batch before, each with its rows in write order
    before = {(p, b): table.column("ts").take(pa.array(r)).to_pylist() for p, b, r in file_groups(meta, table)}
    assert {(p, b): sent.column("ts").take(pa.array(r)).to_pylist() for p, b, r in served} == before
    # a server given only its buckets' rows, taken in that order, finds them in order too
    mine = [r for p, b, r in served if b in owned]
    if mine:
        piece = sent.take(pa.array(np.sort(np.concatenate(mine))))
        assert np.array_equal(np.concatenate([r for _, _, r in file_groups(meta, piece)]), np.arange(piece.num_rows))
