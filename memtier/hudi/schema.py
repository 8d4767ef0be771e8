"""Table schemas: validation at create, input conformance on write, physical file types.

A table has two Arrow schemas:

* the *logical* schema the user created it with (persisted in ``hoodie.properties``), which
  reads return exactly;
* the *physical* schema files are written with: the logical schema after a round trip
  through Avro (int8/int16 -> int32, large_string -> string, timestamps -> UTC micros), so
  base files and Avro/Parquet log blocks agree column by column, as they do in tables
  Apache Hudi writes. Readers of the files (hudi-rs, Spark) see consistent types.
"""

from __future__ import annotations

import base64
from collections.abc import Collection, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.types as pat

from memtier.errors import (
    InvalidArgumentError,
    InvalidRowError,
    SchemaMismatchError,
    UnknownColumnError,
)
from memtier.hudi.avro import META_FIELDS, arrow_to_avro_schema, avro_to_arrow_schema

__all__ = [
    "META_SCHEMA",
    "check_ordering_not_null",
    "conform",
    "decode_schema",
    "encode_schema",
    "leavable",
    "physical_schema",
    "to_table",
    "validate_table_schema",
]

META_SCHEMA = pa.schema([pa.field(name, pa.string()) for name in META_FIELDS])


def _is_key_type(t: pa.DataType) -> bool:
    return pat.is_string(t) or pat.is_large_string(t) or pat.is_integer(t) or pat.is_boolean(t)


def _is_ordering_type(t: pa.DataType) -> bool:
    return (
        pat.is_integer(t)
        or pat.is_floating(t)
        or pat.is_timestamp(t)
        or pat.is_date(t)
        or pat.is_string(t)
        or pat.is_decimal(t)
    )


def _is_partition_type(t: pa.DataType) -> bool:
    return _is_key_type(t) or pat.is_date32(t)


def validate_table_schema(
    schema: pa.Schema,
    record_key: Sequence[str] | None,
    ordering_field: str | None,
    partition_fields: Sequence[str],
) -> None:
    """Refuse a table definition memtier cannot write correctly, naming what is wrong
    (``record_key`` None: an append-only table, with no record-key columns)."""
    if not isinstance(schema, pa.Schema):
        raise InvalidArgumentError(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
    if len(schema) == 0:
        raise InvalidArgumentError("schema has no columns")
    names = schema.names
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SchemaMismatchError(f"schema has duplicate columns {duplicates}")
    reserved = [n for n in names if n in META_FIELDS]
    if reserved:
        raise SchemaMismatchError(f"columns {reserved} are reserved for Hudi meta fields")
    if record_key is None:  # append-only: Hudi generates the record keys
        record_key = ()
    elif not record_key:
        raise InvalidArgumentError("record_key must name at least one column (or be None: append-only)")

    def check(role: str, columns: Sequence[str], type_ok: Any, what: str) -> None:
        for column in columns:
            if column not in names:
                raise UnknownColumnError(f"{role} column {column!r} is not in the schema {names}")
            t = schema.field(column).type
            if not type_ok(t):
                raise SchemaMismatchError(f"{role} column {column!r} has type {t}; {what}")

    check("record key", record_key, _is_key_type, "keys must be string, integer or bool")
    if len(set(record_key)) != len(record_key):
        raise InvalidArgumentError(f"record_key {list(record_key)} repeats a column")
    if ordering_field is not None:
        check(
            "ordering", [ordering_field], _is_ordering_type,
            "ordering must be numeric, decimal, date, timestamp or string",
        )
    check(
        "partition", partition_fields, _is_partition_type,
        "partition columns must be string, integer, bool or date",
    )
    if len(set(partition_fields)) != len(partition_fields):
        raise InvalidArgumentError(f"partition_fields {list(partition_fields)} repeats a column")
    arrow_to_avro_schema(schema, "check")  # refuses types Hudi's Avro cannot carry


def physical_schema(logical: pa.Schema, table_name: str) -> pa.Schema:
    """The column types data files carry: the logical schema normalised through Avro."""
    return avro_to_arrow_schema(arrow_to_avro_schema(logical, table_name))


def encode_schema(schema: pa.Schema) -> str:
    """A schema as one base64 line (for ``hoodie.properties``)."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def decode_schema(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def to_table(data: Any) -> pa.Table:
    """Accept a pyarrow Table or RecordBatch, a list of batches, or a pandas DataFrame."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, list) and data and all(isinstance(b, pa.RecordBatch) for b in data):
        return pa.Table.from_batches(data)
    module = type(data).__module__
    if module.startswith("pandas") and type(data).__name__ == "DataFrame":
        return pa.Table.from_pandas(data, preserve_index=False)
    raise InvalidArgumentError(
        "data must be a pyarrow.Table, pyarrow.RecordBatch, a list of RecordBatches or a "
        f"pandas.DataFrame, got {type(data).__name__}"
    )


def leavable(
    schema: pa.Schema, key_fields: Sequence[str], partition_fields: Sequence[str], ordering_field: str | None
) -> frozenset[str]:
    """The columns a write batch may leave out, null in its rows: the nullable ones that
    neither key, place nor order the rows (as Hudi's writers do with
    ``hoodie.write.set.null.for.missing.columns``): a producer that has not heard of
    columns added to the table writes on."""
    roles = {*key_fields, *partition_fields, ordering_field}
    return frozenset(f.name for f in schema if f.nullable and f.name not in roles)


def conform(
    data: Any, schema: pa.Schema, required: Sequence[str] | None = None, *, optional: Collection[str] = ()
) -> pa.Table:
    """``data`` as a Table with exactly ``schema``'s columns and types, or a clear error.

    With ``required`` (e.g. the key and partition columns of a delete) only those columns
    must be present, and the result holds only them. Columns in ``optional`` may be
    missing: they are null.
    """
    table = to_table(data)
    if required is None and table.schema.equals(schema, check_metadata=True):
        return table
    wanted = list(required) if required is not None else schema.names
    present = set(table.column_names)
    missing = [n for n in wanted if n not in present and n not in optional]
    if missing:
        raise SchemaMismatchError(f"data lacks columns {missing} of the table schema")
    if required is None:
        extra = [n for n in table.column_names if n not in set(schema.names)]
        if extra:
            raise SchemaMismatchError(f"data has columns {extra} that the table does not have")
    columns = []
    for name in wanted:
        target = schema.field(name).type
        if name not in present:
            columns.append(pa.nulls(table.num_rows, target))
            continue
        column = table.column(name)
        if column.type != target:
            try:
                column = column.cast(target, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise SchemaMismatchError(
                    f"column {name!r} has type {column.type}, the table expects {target}: {e}"
                ) from e
        columns.append(column)
    fields = [schema.field(n) for n in wanted]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def check_ordering_not_null(table: pa.Table, ordering_field: str | None) -> None:
    """Every written row needs an ordering value: merges compare it."""
    if ordering_field is None or ordering_field not in table.column_names:
        return
    column = table.column(ordering_field)
    if column.null_count:
        first = column.is_null().index(True).as_py()
        raise InvalidRowError(
            f"ordering column {ordering_field!r} is null at row {first}; every row needs one"
        )
