"""Apache Hudi on Spark (the reference reader) reads a table whose schema changed while it
was written (added columns, nested ones, ints and floats widened, by ``alter_table`` and
by evolving writes) as memtier's model has it, before and after compaction: including the
file groups hudi-rs 0.5 cannot read before compaction (an older log block both lacking a
column and holding a narrower type: tests/property/test_schema_change_properties.py).
Trino reads it through the columns the master's catalog sync gave the metastore."""

from __future__ import annotations

import pytest

from tests.property.test_schema_change_properties import HUDI_RS_GAP, evolving_table
from tests.support.evolving import History
from tests.support.hudi_spark import HudiSpark
from tests.support.hudirs import hudi_rs_read
from tests.support.trino import TrinoServer

pytestmark = [pytest.mark.slow, pytest.mark.spark]

#: Histories (seed, operations) whose flushed log blocks span every schema change; the
#: first two leave hudi-rs's gap before compaction (measured).
HISTORIES = [
    (3, ["upsert", "flush", "upsert", "flush", "change", "change", "upsert", "flush", "change", "change",
         "upsert", "flush"]),
    (4, ["upsert", "flush", "upsert", "flush", "change", "change", "change", "change", "change", "change",
         "upsert", "delete", "flush"]),
    (5, ["upsert", "change", "upsert", "delete", "change", "upsert", "flush", "change", "upsert", "change",
         "change", "upsert", "change", "upsert", "flush"]),
]


def spark_rows(hudi: HudiSpark, path: str, history: History, mode: str = "snapshot") -> list[dict]:
    return hudi.read(path, mode).select(history.schema.names).sort_by("id").to_pylist()


@pytest.mark.parametrize(("seed", "operations"), HISTORIES)
def test_apache_hudi_on_spark_reads_an_evolved_table_before_and_after_compaction(
    hudi_spark: HudiSpark, seed: int, operations: list[str],
) -> None:
    with evolving_table(seed) as (_cluster, history):
        history.run(operations)
        history.client.flush("t")
        path = history.client.describe("t")["path"]
        expected = history.expected()
        assert spark_rows(hudi_spark, path, history) == expected, history.log
        try:
            hudi_rs_read(path)
        except Exception as e:  # noqa: BLE001
            assert any(g in str(e) for g in HUDI_RS_GAP), e  # the gap only Apache Hudi gets past
        history.compact()
        assert spark_rows(hudi_spark, path, history) == expected, history.log
        assert spark_rows(hudi_spark, path, history, "read_optimized") == expected, history.log
        assert hudi_rs_read(path).select(history.schema.names).sort_by("id").to_pylist() == expected


#: The columns Trino's rows are compared by (not the struct: Trino returns it as a row).
FLAT = ["id", "ts", "part", "n", "f", "note", "extra"]


def test_trino_reads_an_evolved_table_through_the_columns_the_catalog_sync_gave_it(trino: TrinoServer) -> None:
    database = "evolving"
    seed, operations = HISTORIES[0]
    with evolving_table(seed, {"catalog.file-metastore": trino.metastore, "catalog.database": database}) as (
        cluster, history,
    ):
        history.run(operations)
        history.client.flush("t")
        names = [c for c in FLAT if c in history.schema.names]

        def trino_rows(view: str) -> list[dict]:
            found = trino.query(f"SELECT {', '.join(names)} FROM {database}.{view} ORDER BY id")
            return [dict(zip(names, r, strict=True)) for r in found]

        def memtier_rows(mode: str) -> list[dict]:
            return history.client.read("t", mode=mode).select(names).sort_by("id").to_pylist()

        # Trino 476's Hudi connector reads base files only: the read-optimized view, whose
        # older base files lack the new columns and hold the narrower types
        read_optimized = memtier_rows("read_optimized")
        assert read_optimized and trino_rows("t_ro") == read_optimized, history.log
        history.compact()
        assert trino_rows("t_ro") == memtier_rows("latest") == [
            {c: r[c] for c in names} for r in history.expected()], history.log
