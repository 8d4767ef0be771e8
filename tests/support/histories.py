"""Random upsert/delete histories of a small keyed table, applied to a Hudi table and to
the model of it alike (the property tests' shared table, variants and commit step)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from memtier.hudi import HudiTable
from tests.support.model import TableModel

SCHEMA = pa.schema([("k", pa.int64()), ("o", pa.int64()), ("part", pa.string()), ("v", pa.string())])
COLUMNS = SCHEMA.names
#: (table type, log block format) of the table a history is written to.
VARIANT = st.sampled_from([
    ("MERGE_ON_READ", "avro"), ("MERGE_ON_READ", "parquet"), ("COPY_ON_WRITE", "avro"),
])


def row(k: int, o: int, tag: str) -> dict:
    return {"k": k, "o": o, "part": f"p{k % 3}", "v": tag}


def create(path: str, variant: tuple[str, str]) -> tuple[HudiTable, TableModel]:
    """A new table at ``path`` (keyed on ``k``, ordered by ``o``, partitioned by ``part``,
    2 buckets) and an empty model of it."""
    table_type, block_format = variant
    table = HudiTable.create(
        path, SCHEMA, record_key="k", ordering_field="o", partition_fields="part",
        buckets=2, table_type=table_type, log_block_format=block_format,
    )
    model = TableModel(("k",), "o", ("part",), buckets=2, copy_on_write=table_type == "COPY_ON_WRITE")
    return table, model


def commit(table: HudiTable, model: TableModel, number: int, op: tuple[str, Any]) -> None:
    """Write op ``number`` of a history, ``("upsert", [(key, ordering), ...])`` or
    ``("delete", [key, ...])``, to the table and the model."""
    kind, payload = op
    if kind == "upsert":
        batch = [row(k, o, f"c{number}-r{i}") for i, (k, o) in enumerate(payload)]
        table.write(pa.Table.from_pylist(batch, schema=SCHEMA))
        model.upsert(number, batch)
    else:
        batch = [row(k, 0, "") for k in payload]
        table.write(pa.Table.from_pylist(batch, schema=SCHEMA), operation="delete")
        model.delete(number, batch)
