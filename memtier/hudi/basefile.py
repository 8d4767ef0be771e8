"""The five Hudi meta columns, and base Parquet files written with them.

Meta columns are built vectorized: commit time, partition path and file name are one
value per file (written as a dictionary, so they cost nothing), the sequence number is
``<instant>_<task>_<row>``, the record key comes from :func:`memtier.hudi.keys.record_keys`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memtier.hudi.keyfilter import key_filter_metadata
from memtier.hudi.keys import record_keys
from memtier.hudi.parquetfile import write_parquet
from memtier.hudi.rows import take_rows
from memtier.hudi.schema import META_SCHEMA
from memtier.io import FileIO

__all__ = ["constant_column", "key_order", "sort_by_key", "with_meta_columns", "write_base_file"]

def constant_column(value: str, rows: int) -> pa.DictionaryArray:
    """``rows`` copies of ``value`` as a one-entry dictionary array."""
    indices = pa.array(np.zeros(rows, dtype=np.int32))
    return pa.DictionaryArray.from_arrays(indices, pa.array([value], pa.string()))


#: Row numbers' last digits repeat every 10**_CYCLE_DIGITS rows: one pattern copied whole.
_CYCLE_DIGITS = 4


def _sequence_numbers(instant: str, task: int, rows: int) -> pa.Array:
    """``<instant>_<task>_<row>`` for rows 0..rows-1, built straight into Arrow buffers.

    Rows with the same number of digits are consecutive and equally long, so each run is
    one rectangular block of the string data (:func:`_fill_numbers`).
    """
    prefix = np.frombuffer(f"{instant}_{task}_".encode(), dtype=np.uint8)
    offsets = np.empty(rows + 1, dtype=np.int64)
    offsets[0] = 0
    blocks = []
    start, end_offset, width = 0, 0, 1
    while start < rows:
        end = min(rows, 10**width)
        row_bytes = len(prefix) + width
        offsets[start + 1 : end + 1] = end_offset + row_bytes * np.arange(1, end - start + 1)
        blocks.append((start, end, width, end_offset))
        end_offset += row_bytes * (end - start)
        start, width = end, width + 1
    data = np.empty(end_offset, dtype=np.uint8)
    for start, end, width, offset in blocks:
        block = data[offset : offset + (len(prefix) + width) * (end - start)].reshape(end - start, -1)
        _fill_numbers(block, prefix, start, width)
    if end_offset < 2**31:
        return pa.StringArray.from_buffers(
            rows, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)
        )
    return pa.LargeStringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(data))


def _fill_numbers(block: np.ndarray, prefix: np.ndarray, start: int, width: int) -> None:
    """Row i of ``block`` ((rows, len(prefix) + width) bytes): ``prefix``, then the number
    ``start + i`` in ``width`` decimal digits. From 5 digits on, a run starts at a multiple
    of 10**4: its rows are one 10**4-row pattern (prefix and last four digits) copied
    whole, with only the leading digits written per row (~6x faster than a division per
    digit and row)."""
    rows, cycle = len(block), 10**_CYCLE_DIGITS
    lead = width - _CYCLE_DIGITS  # digits above the cycling ones
    if lead < 1 or start % cycle:
        block[:, : len(prefix)] = prefix
        block[:, len(prefix) :] = _digits(np.arange(start, start + rows, dtype=np.int64), width)
        return
    pattern = np.empty((cycle, block.shape[1]), dtype=np.uint8)
    pattern[:, : len(prefix)] = prefix
    pattern[:, len(prefix) + lead :] = _digits(np.arange(cycle, dtype=np.int64), _CYCLE_DIGITS)
    leads = _digits(np.arange(start // cycle, (start + rows - 1) // cycle + 1, dtype=np.int64), lead)
    whole, rest = divmod(rows, cycle)
    cycles = block[: whole * cycle].reshape(whole, cycle, block.shape[1])
    cycles[:] = pattern
    cycles[:, :, len(prefix) : len(prefix) + lead] = leads[:whole, None, :]
    if rest:
        block[whole * cycle :] = pattern[:rest]
        block[whole * cycle :, len(prefix) : len(prefix) + lead] = leads[whole]


def _digits(values: np.ndarray, width: int) -> np.ndarray:
    """``values`` (non-negative, below 10**width) as ASCII decimal digits, (len, width) bytes."""
    out = np.empty((len(values), width), dtype=np.uint8)
    for place in range(width - 1, -1, -1):
        values, digit = np.divmod(values, 10)
        out[:, place] = digit + 48
    return out


def with_meta_columns(
    data: pa.Table,
    *,
    instant: str,
    task: int,
    key_fields: Sequence[str],
    partition_path: str,
    file_name: str,
    keys: pa.Array | None = None,
) -> pa.Table:
    """``data`` with the five meta columns in front (``file_name``: base file name, or the
    file id for log records, as Hudi writes them). Without ``key_fields`` (an append-only
    table) the record keys are generated as Hudi 0.14+ generates them: the sequence
    numbers ``<instant>_<task>_<row>``, unique in the table."""
    rows = data.num_rows
    sequence = _sequence_numbers(instant, task, rows)
    if keys is None:
        keys = record_keys(data, key_fields) if key_fields else sequence
    meta = [
        constant_column(instant, rows),
        sequence,
        keys,
        constant_column(partition_path, rows),
        constant_column(file_name, rows),
    ]
    fields = [*META_SCHEMA, *data.schema]
    meta_fields = [pa.field(f.name, m.type) for f, m in zip(META_SCHEMA, meta, strict=True)]
    schema = pa.schema([*meta_fields, *fields[len(META_SCHEMA):]])
    return pa.Table.from_arrays([*meta, *data.columns], schema=schema)


def sort_by_key(table: pa.Table, key_columns: str | Sequence[str]) -> pa.Table:
    """Rows in increasing record-key order (a no-op when already sorted): by the key
    columns in their own types, the first deciding, then the next (a single integer key
    numerically, a single string key as Hudi orders record keys: by bytes). Base files
    are, so merges can binary-search integer keys and key reads prune row groups by the
    leading key column's statistics."""
    columns = [key_columns] if isinstance(key_columns, str) else list(key_columns)
    if table.num_rows < 2 or not columns:
        return table
    order = key_order(table.select(columns))
    return table if order is None else take_rows(table, order)


def key_order(keys: pa.Table) -> np.ndarray | None:
    """The order sorting the rows of ``keys`` (the key columns, the first deciding),
    or None when they already are in order."""
    if keys.num_columns == 1 and pa.types.is_integer(keys.schema.field(0).type):
        values = keys.column(0).to_numpy()
        if len(values) < 2 or bool(np.all(values[1:] >= values[:-1])):
            return None
        return np.argsort(values, kind="stable")
    # Arrow's sort, stable; rows already in order cost about what checking them would
    order = pc.sort_indices(keys, sort_keys=[(c, "ascending") for c in keys.column_names]).to_numpy()
    return None if len(order) < 2 or bool(np.all(order[1:] > order[:-1])) else order


def write_base_file(io: FileIO, path: str, table: pa.Table, key_fields: Sequence[str]) -> int:
    """Write ``table`` (meta columns first) as a base file, durably, with a Bloom filter
    of each of its ``key_fields`` in the footer; returns its size."""
    with io.open_output(path) as sink:
        write_parquet(table, sink, key_filter_metadata(table, key_fields))
    return io.info(path).size
