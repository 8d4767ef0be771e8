"""Arrow tables and Spark schemas: the table's schema as Spark sees it, and record
batches cast to exactly the Arrow types Spark expects for it."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from memtier.errors import InvalidArgumentError
from memtier.hudi.deletes import DELETE_FLAG

__all__ = ["arrow_schema", "check_columns", "spark_batches", "spark_schema"]




def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of a memtier table's Arrow schema."""
    return from_arrow_schema(schema)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of the rows Spark hands a writer of a DataFrame of ``schema``."""
    return to_arrow_schema(schema, timezone="UTC")


def spark_batches(table: pa.Table, schema: StructType) -> Iterator[pa.RecordBatch]:
    """``table``'s rows as batches of exactly ``schema``'s names and Arrow types."""
    if table.num_rows == 0:
        return
    target = to_arrow_schema(schema, timezone="UTC")
    selected = table.select(target.names)
    yield from (selected if selected.schema == target else selected.cast(target)).to_batches()


def check_columns(schema: pa.Schema, columns: list[str], *, delete_flag: bool) -> list[str]:
    """The DataFrame's columns, once each is known to be one of the table's (or, where
    ``delete_flag`` allows it, Hudi's boolean ``_hoodie_is_deleted``)."""
    if DELETE_FLAG in columns and not delete_flag and DELETE_FLAG not in schema.names:
        raise InvalidArgumentError(
            f"a backfill takes no {DELETE_FLAG} column: write deletes with option operation=delete"
        )
    unknown = [c for c in columns if c not in schema.names and not (delete_flag and c == DELETE_FLAG)]
    if unknown:
        raise InvalidArgumentError(f"columns {unknown} are not in the table {schema.names}")
    return columns
