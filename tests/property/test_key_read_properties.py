"""Random upsert/delete histories read back by key: reads filtered on the record key,
which touch only the row groups and rows of those keys (memtier.hudi.keyread) and keep
log files decoded between reads, equal the model's rows of those keys after every commit,
with base files cut into row groups of a few rows so keys sit on every boundary."""

from __future__ import annotations

import shutil
import tempfile
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memtier.hudi import HudiTable
from memtier.hudi.cache import SliceCache
from memtier.hudi.reader import read_table
from tests.support.histories import COLUMNS, VARIANT, commit, create
from tests.support.hudirs import rows
from tests.support.model import project

KEYS = 40

KEY = st.integers(min_value=0, max_value=KEYS - 1)
UPSERT = st.lists(st.tuples(KEY, st.integers(min_value=-1, max_value=4)), min_size=1, max_size=25)
OP = st.one_of(
    UPSERT.map(lambda r: ("upsert", r)),
    st.lists(KEY, min_size=1, max_size=8).map(lambda k: ("delete", k)),
)
PROBE = st.lists(st.integers(min_value=-2, max_value=KEYS + 1), min_size=1, max_size=6)


def by_key(table: HudiTable, cache: SliceCache, filters: list) -> list[tuple]:
    return rows(read_table(table.meta, filters=filters, cache=cache), COLUMNS)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OP, min_size=1, max_size=5), variant=VARIANT,
       group_rows=st.integers(min_value=1, max_value=4), probes=st.lists(PROBE, min_size=5, max_size=5))
def test_key_reads_equal_model(ops, variant, group_rows, probes) -> None:
    root = tempfile.mkdtemp(prefix="memtier-keyprop-")
    cache = SliceCache()  # one reader process for the whole history: cached files reused
    try:
        with patch("memtier.hudi.parquetfile.ROW_GROUP_ROWS", group_rows):
            table, model = create(f"{root}/t", variant)
            for number, op in enumerate(ops, start=1):
                commit(table, model, number, op)
                expected = project(model.rows(), COLUMNS)
                probe = probes[number - 1]  # keys given alone: every partition's slice is asked
                assert by_key(table, cache, [("k", "in", probe)]) == [r for r in expected if r[0] in probe]
            for k in range(-1, KEYS + 1):
                assert by_key(table, cache, [("k", "=", k)]) == [r for r in expected if r[0] == k], k
            assert by_key(table, cache, [("k", "in", [1, 2, 3]), ("k", ">", 1)]) == [
                r for r in expected if r[0] in (2, 3)]
    finally:
        shutil.rmtree(root, ignore_errors=True)
