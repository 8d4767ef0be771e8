"""Random upsert/delete histories: memtier's reader and hudi-rs both equal a model of
Hudi's merge (including its layout-dependent corner: a key deleted and re-inserted in the
logs with an ordering value below its base version reads as the base version)."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.histories import COLUMNS, VARIANT, commit, create
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.model import project

KEY = st.integers(min_value=0, max_value=24)
UPSERT = st.lists(st.tuples(KEY, st.integers(min_value=-1, max_value=4)), min_size=1, max_size=10)
OP = st.one_of(
    UPSERT.map(lambda r: ("upsert", r)),
    st.lists(KEY, min_size=1, max_size=5).map(lambda k: ("delete", k)),
)

@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OP, min_size=1, max_size=6), variant=VARIANT)
# Hudi's layout-dependent corners, as hudi-rs 0.5 reads them (base version wins):
@example(ops=[("upsert", [(0, 1)]), ("delete", [0]), ("upsert", [(0, 0)])], variant=("MERGE_ON_READ", "avro"))
@example(
    ops=[("upsert", [(0, 1)]), ("upsert", [(0, 2)]), ("delete", [0]), ("upsert", [(0, 0)])],
    variant=("MERGE_ON_READ", "parquet"),
)
@example(ops=[("upsert", [(0, 1)]), ("delete", [0]), ("upsert", [(0, 0)])], variant=("COPY_ON_WRITE", "avro"))
@example(ops=[("upsert", [(3, 2)]), ("delete", [3]), ("upsert", [(3, -1)])], variant=("MERGE_ON_READ", "avro"))
def test_readers_equal_model(ops, variant) -> None:
    root = tempfile.mkdtemp(prefix="memtier-prop-")
    try:
        path = f"{root}/t"
        table, model = create(path, variant)
        for number, op in enumerate(ops, start=1):
            commit(table, model, number, op)
        expected = project(model.rows(), COLUMNS)
        assert rows(table.read(), COLUMNS) == expected
        assert rows(hudi_rs_read(path), COLUMNS) == expected
    finally:
        shutil.rmtree(root, ignore_errors=True)
