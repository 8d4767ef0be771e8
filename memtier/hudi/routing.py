"""Routing a batch to file groups: record keys, partition paths and bucket ids, then one
de-duplicated change per (partition, bucket), exactly as a Hudi bucket-index writer would."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memtier.errors import UnsupportedTableError
from memtier.hudi.filegroup import FileGroupChange
from memtier.hudi.filenames import bucket_file_id
from memtier.hudi.keys import KeyColumns, partition_paths
from memtier.hudi.merge import latest_per_key
from memtier.hudi.tablemeta import TableMeta

__all__ = ["route"]


def _partition_codes(meta: TableMeta, table: pa.Table) -> tuple[np.ndarray, list[str]]:
    fields = meta.config.partition_fields
    if not fields:
        return np.zeros(table.num_rows, dtype=np.int64), [""]
    paths = partition_paths(table, fields, meta.config.hive_style_partitioning)
    encoded = pc.dictionary_encode(paths) if not pa.types.is_dictionary(paths.type) else paths
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, encoded.dictionary.to_pylist()


def _unique_rows(
    keys: pa.Array, integer_keys: np.ndarray | None, ordering: pa.Array | None
) -> np.ndarray | None:
    """Row order keeping one row per key (greatest ordering, later rows winning ties):
    sorted by key when the keys are integers, None when every row may stay as it is."""
    if integer_keys is None:
        return latest_per_key(keys, ordering, np.arange(len(keys), dtype=np.int64))
    order = np.argsort(integer_keys, kind="stable")
    ordered = integer_keys[order]
    if len(ordered) < 2 or bool(np.all(ordered[1:] != ordered[:-1])):
        return order
    winners = latest_per_key(keys, ordering, np.arange(len(keys), dtype=np.int64))
    assert winners is not None
    return winners[np.argsort(integer_keys[winners], kind="stable")]


def route(
    meta: TableMeta,
    table: pa.Table,
    *,
    deletes: bool,
    existing: Mapping[tuple[str, int], str],
) -> list[FileGroupChange]:
    """One change per file group the batch touches.

    ``table`` holds physical columns (all of them, or for deletes at least the key and
    partition columns); ``existing`` maps (partition, bucket) to the file id already
    there. Upserts keep one row per key, as Hudi's pre-combine does, sorted by key when
    the key is one integer column (so base files can be binary-searched).
    """
    buckets = meta.config.buckets
    if not buckets:
        raise UnsupportedTableError(
            f"table {meta.config.name} at {meta.base_path} has no bucket index "
            "(hoodie.bucket.index.num.buckets); memtier writes bucket-indexed tables only"
        )
    key_columns = KeyColumns.of(table, meta.config.record_key_fields)
    keys = key_columns.record_keys()
    codes, partitions = _partition_codes(meta, table)
    group = codes * buckets + key_columns.bucket_ids(buckets).astype(np.int64)
    order = np.argsort(group, kind="stable")
    sorted_groups = group[order]
    starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
    ends = np.r_[starts[1:], len(order)]
    integer_key = meta.integer_key if not deletes else None
    all_integer_keys = table.column(integer_key).to_numpy() if integer_key else None
    ordering = meta.merge_spec.ordering_column
    changes = []
    for start, end in zip(starts, ends, strict=True):
        code = int(sorted_groups[start])
        partition, bucket = partitions[code // buckets], code % buckets
        file_id = existing.get((partition, bucket)) or bucket_file_id(bucket)
        rows = order[start:end]
        group_keys = keys.take(pa.array(rows))
        if deletes:
            changes.append(FileGroupChange(partition, file_id, deleted_keys=pc.unique(group_keys)))
            continue
        order_values = table.column(ordering).take(pa.array(rows)).combine_chunks() if ordering else None
        integer_keys = all_integer_keys[rows] if all_integer_keys is not None else None
        keep = _unique_rows(group_keys, integer_keys, order_values)
        if keep is not None:
            rows = rows[keep]
            group_keys = group_keys.take(pa.array(keep))
        changes.append(
            FileGroupChange(partition, file_id, upserts=table.take(pa.array(rows)), record_keys=group_keys)
        )
    return changes
