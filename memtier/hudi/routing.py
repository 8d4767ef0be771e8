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
from memtier.hudi.keys import bucket_ids, partition_paths, record_keys
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
    there. Upserts keep one row per key: the greatest ordering value, later rows winning
    ties, as Hudi's pre-combine does.
    """
    buckets = meta.config.buckets
    if not buckets:
        raise UnsupportedTableError(
            f"table {meta.config.name} at {meta.base_path} has no bucket index "
            "(hoodie.bucket.index.num.buckets); memtier writes bucket-indexed tables only"
        )
    key_fields = meta.config.record_key_fields
    keys = record_keys(table, key_fields)
    codes, partitions = _partition_codes(meta, table)
    group = codes * buckets + bucket_ids(table, key_fields, buckets).astype(np.int64)
    order = np.argsort(group, kind="stable")
    sorted_groups = group[order]
    starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
    ends = np.r_[starts[1:], len(order)]
    changes = []
    ordering = meta.merge_spec.ordering_column
    for start, end in zip(starts, ends, strict=True):
        code = int(sorted_groups[start])
        partition, bucket = partitions[code // buckets], code % buckets
        file_id = existing.get((partition, bucket)) or bucket_file_id(bucket)
        rows = pa.array(order[start:end])
        group_keys = keys.take(rows)
        if deletes:
            changes.append(FileGroupChange(partition, file_id, deleted_keys=pc.unique(group_keys)))
            continue
        rows_table = table.take(rows)
        order_values = rows_table.column(ordering).combine_chunks() if ordering else None
        winners = latest_per_key(group_keys, order_values, np.arange(end - start, dtype=np.int64))
        if winners is not None:
            rows_table = rows_table.take(pa.array(winners))
        changes.append(FileGroupChange(partition, file_id, upserts=rows_table))
    return changes
