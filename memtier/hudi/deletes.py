"""Deletes in a write batch, by Hudi's convention: a boolean ``_hoodie_is_deleted`` column
flags the rows that delete their key (null: not deleted).

A batch whose rows are all deletes needs only the record-key and partition columns (and
the ordering column, to order the deletes against upserts of the same keys); every other
column is null in it. Write paths keep the flag on every row (:func:`with_delete_flags`),
so deletes travel, are logged and are held like any other row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from memtier.errors import InvalidArgumentError, InvalidRowError, SchemaMismatchError
from memtier.hudi.keys import whole
from memtier.hudi.schema import check_ordering_not_null, conform, leavable, to_table

__all__ = ["DELETE_FLAG", "flagged_schema", "prepare_write", "with_delete_flags"]

DELETE_FLAG = "_hoodie_is_deleted"


def flagged_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with the delete flag as its last column (unless it has one already)."""
    if DELETE_FLAG in schema.names:
        return schema
    return schema.append(pa.field(DELETE_FLAG, pa.bool_(), nullable=False))


def _flags(table: pa.Table) -> pa.Array | None:
    """The batch's delete flags (nulls as False), checked to be booleans; None without."""
    if DELETE_FLAG not in table.column_names:
        return None
    column = table.column(DELETE_FLAG)
    if not pat.is_boolean(column.type):
        raise SchemaMismatchError(
            f"column {DELETE_FLAG!r} has type {column.type}; it must be boolean (true deletes the row's key)"
        )
    column = whole(column) if isinstance(column, pa.ChunkedArray) else column
    return pc.fill_null(column, False) if column.null_count else column


def prepare_write(
    data: Any,
    schema: pa.Schema,
    *,
    key_fields: Sequence[str],
    partition_fields: Sequence[str],
    ordering_field: str | None,
) -> pa.Table:
    """A write batch conformed to the table's (logical) ``schema``, the delete flag last
    on every row (:func:`flagged_schema`). Deleted rows may leave out everything but the
    key and partition columns (and the ordering value); other rows need every column
    but those :func:`~memtier.hudi.schema.leavable` (null then), and an ordering value.
    A bad batch is refused whole, with the column at fault named."""
    table = to_table(data)
    optional = leavable(schema, key_fields, partition_fields, ordering_field)
    flags = _flags(table)
    user_flag = DELETE_FLAG in schema.names
    body = table if flags is None or user_flag else table.drop_columns([DELETE_FLAG])
    if flags is None or not pc.any(flags).as_py():
        conformed = conform(body, schema, optional=optional)
        check_ordering_not_null(conformed, ordering_field)
        return with_delete_flags(conformed, flags)
    if not key_fields:
        raise InvalidArgumentError(
            f"column {DELETE_FLAG!r} deletes rows by record key; an append-only table has none"
        )
    deleting = flags.to_numpy(zero_copy_only=False)
    if deleting.all():
        required = [*dict.fromkeys([*key_fields, *partition_fields])]
        given = [n for n in schema.names if n in body.column_names and n not in required]
        present = conform(body, schema, required=[*required, *given])
        columns = [
            present.column(f.name) if f.name in present.column_names else pa.nulls(table.num_rows, f.type)
            for f in schema
        ]
        conformed = pa.Table.from_arrays(columns, schema=schema)
    else:
        conformed = conform(body, schema, optional=optional)
        kept = conformed.filter(pa.array(~deleting))
        try:
            check_ordering_not_null(kept, ordering_field)
        except InvalidRowError as e:
            raise InvalidRowError(f"{e} (counting only the rows not deleted)") from e
    return with_delete_flags(conformed, flags)


class _AllFalse:
    """All-False boolean columns: the last one made, again for a write of as many rows
    (~0.5 us where making it anew takes ~10). Never a slice of a longer one: a table
    server counts a write's memory by the whole size of its buffers."""

    def __init__(self) -> None:
        self._array = pa.array(np.zeros(0, dtype=bool))

    def __call__(self, rows: int) -> pa.Array:
        array = self._array
        if len(array) != rows:
            array = self._array = pa.array(np.zeros(rows, dtype=bool))
        return array


_all_false = _AllFalse()


def with_delete_flags(table: pa.Table, flags: pa.Array | None = None) -> pa.Table:
    """``table`` with the delete flag column last (all False when ``flags`` is None)."""
    if flags is None:
        flags = _all_false(table.num_rows)
    if DELETE_FLAG in table.column_names:
        return table.set_column(table.column_names.index(DELETE_FLAG), DELETE_FLAG, flags)
    return table.append_column(pa.field(DELETE_FLAG, pa.bool_(), nullable=False), flags)
