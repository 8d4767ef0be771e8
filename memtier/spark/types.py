"""Arrow tables and Spark schemas: the table's schema as Spark sees it, and record
batches cast to exactly the Arrow types Spark expects for it."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from memtier.errors import InvalidArgumentError

__all__ = ["check_columns", "spark_batches", "spark_schema"]

#: Hudi's delete flag column (not accepted until the write tier takes deletes).
DELETE_FLAG = "_hoodie_is_deleted"


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of a memtier table's Arrow schema."""
    return from_arrow_schema(schema)


def spark_batches(table: pa.Table, schema: StructType) -> Iterator[pa.RecordBatch]:
    """``table``'s rows as batches of exactly ``schema``'s names and Arrow types."""
    if table.num_rows == 0:
        return
    target = to_arrow_schema(schema, timezone="UTC")
    selected = table.select(target.names)
    yield from (selected if selected.schema == target else selected.cast(target)).to_batches()


def check_columns(schema: pa.Schema, columns: list[str]) -> list[str]:
    """The DataFrame's columns, once each is known to be one of the table's."""
    if DELETE_FLAG in columns and DELETE_FLAG not in schema.names:
        raise InvalidArgumentError(
            f"the {DELETE_FLAG} column (Hudi's delete flag) is not supported by memtier's write "
            "path yet; write deletes with a backfill's operation=delete"
        )
    unknown = [c for c in columns if c not in schema.names]
    if unknown:
        raise InvalidArgumentError(f"columns {unknown} are not in the table {schema.names}")
    return columns
