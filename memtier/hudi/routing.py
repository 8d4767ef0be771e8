"""Routing a batch to file groups: record keys, partition paths and bucket ids, then one
de-duplicated change per (partition, bucket), exactly as a Hudi bucket-index writer would."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memtier.errors import InvalidArgumentError
from memtier.hudi.filegroup import FileGroupChange
from memtier.hudi.filenames import bucket_file_id
from memtier.hudi.keys import KeyColumns, bucket_ids, partition_paths
from memtier.hudi.merge import dense_repeats, latest_per_key
from memtier.hudi.tablemeta import TableMeta

__all__ = [
    "Located", "all_unique", "file_group_order", "file_groups", "keep_latest", "locate", "producer_bucket",
    "route", "spread",
]


def _partition_codes(meta: TableMeta, table: pa.Table) -> tuple[np.ndarray, list[str]]:
    return _codes(table, meta.config.partition_fields, meta.config.hive_style_partitioning)


def _group_codes(
    table: pa.Table, fields: Sequence[str], hive_style: bool, row_buckets: np.ndarray, buckets: int
) -> tuple[np.ndarray, list[str]]:
    """Each row's file group as a number (partition * buckets + bucket; the bucket itself
    without partitions), and the partition paths by partition number."""
    if not fields:
        return row_buckets, [""]
    codes, partitions = _codes(table, fields, hive_style)
    return codes * buckets + row_buckets.astype(np.int64), partitions


def _codes(table: pa.Table, fields: Sequence[str], hive_style: bool) -> tuple[np.ndarray, list[str]]:
    """Each row's partition as a number (partitions numbered by first appearance), and
    the partition paths by number."""
    if not fields:
        return np.zeros(table.num_rows, dtype=np.int64), [""]
    paths = partition_paths(table, fields, hive_style)
    encoded = pc.dictionary_encode(paths) if not pa.types.is_dictionary(paths.type) else paths
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, encoded.dictionary.to_pylist()


def _small_codes(values: np.ndarray) -> np.ndarray:
    """``values`` in the narrowest unsigned type: numpy radix-sorts 8/16-bit integers."""
    top = int(values.max()) if len(values) else 0
    for dtype in (np.uint8, np.uint16):
        if top <= np.iinfo(dtype).max:
            return values.astype(dtype)
    return values


def all_unique(keys: pa.Array, integer_keys: np.ndarray | None) -> bool:
    """Whether no key repeats in the batch (then none repeats within a file group)."""
    if integer_keys is None:
        return pc.count_distinct(keys).as_py() == len(keys)
    if len(integer_keys) < 2:
        return True
    repeats = dense_repeats(integer_keys, int(integer_keys.min()), int(integer_keys.max()))
    if repeats is not None:
        return not repeats
    ordered = np.sort(integer_keys)
    return bool(np.all(ordered[1:] != ordered[:-1]))


def _key_order(integer_keys: np.ndarray) -> np.ndarray | None:
    """The order sorting these keys, or None when they already are."""
    if len(integer_keys) < 2 or bool(np.all(integer_keys[1:] > integer_keys[:-1])):
        return None
    return np.argsort(integer_keys, kind="stable")


@dataclass(frozen=True)
class Located:
    """Where a batch's rows go: record keys, and the rows of each (partition, bucket)."""

    keys: pa.Array
    integer_keys: np.ndarray | None  # the single integer key column, when there is one
    groups: tuple[tuple[str, int, np.ndarray], ...]  # (partition, bucket, row indices)


def locate(meta: TableMeta, table: pa.Table, *, integer_keys: bool = True) -> Located:
    """Record keys, partition paths and buckets of ``table`` (physical columns), grouped."""
    buckets = meta.require_bucket_index()
    key_columns = KeyColumns.of(table, meta.config.record_key_fields)
    groups = _grouped(meta, table, key_columns.bucket_ids(buckets), buckets)
    integer_key = meta.integer_key if integer_keys else None
    values = table.column(integer_key).to_numpy() if integer_key else None
    return Located(key_columns.record_keys(), values, groups)


def file_groups(meta: TableMeta, table: pa.Table) -> tuple[tuple[str, int, np.ndarray], ...]:
    """(partition, bucket, row indices) of each file group ``table`` (physical columns)
    touches, as :func:`locate` groups them, without making the record keys' strings."""
    buckets = meta.require_bucket_index()
    return _grouped(meta, table, bucket_ids(table, meta.config.record_key_fields, buckets), buckets)


def _grouped(
    meta: TableMeta, table: pa.Table, row_buckets: np.ndarray, buckets: int
) -> tuple[tuple[str, int, np.ndarray], ...]:
    """The rows of each (partition, bucket) of ``buckets``, in order, given each row's bucket."""
    group, partitions = _group_codes(table, meta.config.partition_fields, meta.config.hive_style_partitioning,
                                     row_buckets, buckets)
    if len(group) < 2 or bool(np.all(group[1:] >= group[:-1])):  # as clients send them: no sort
        order, sorted_groups = np.arange(len(group)), group
    else:
        order = _stable_order(group)
        sorted_groups = group[order]
    starts = [0, *(np.flatnonzero(sorted_groups[1:] != sorted_groups[:-1]) + 1).tolist()] if len(group) else []
    ends = [*starts[1:], len(order)]
    return tuple(
        (partitions[code // buckets], code % buckets, order[a:b])
        for code, a, b in zip(sorted_groups[starts].tolist(), starts, ends, strict=True)
    )


def _stable_order(group: np.ndarray) -> np.ndarray:
    """The stable sort order of file-group numbers (radix-sorted in the narrowest type)."""
    return np.argsort(_small_codes(group), kind="stable")


def file_group_order(
    table: pa.Table, key_fields: Sequence[str], partition_fields: Sequence[str], buckets: int,
    row_buckets: np.ndarray | None = None,
) -> np.ndarray | None:
    """An order of ``table``'s rows that puts each file group's rows together, as a
    table server groups them (:func:`file_groups`: partitions by first appearance, then
    buckets; rows of a group in write order), so that each file group's rows are one run
    of the batch a server gets (a slice of it in memory and a run in the WAL, where rows
    in another order are a selection by position); None when the rows are in it already.
    Any subset of the rows taken in this order is in it too (a batch split over table
    servers by bucket). ``row_buckets``: each row's bucket when known already.
    Raises what :func:`bucket_ids` raises for bad keys."""
    if row_buckets is None:
        row_buckets = bucket_ids(table, key_fields, buckets)
    # (paths hive-style or not: the same partitions, numbered in the same order)
    group, _ = _group_codes(table, partition_fields, False, row_buckets, buckets)
    if len(group) < 2 or bool(np.all(group[1:] >= group[:-1])):
        return None
    return _stable_order(group)


def producer_bucket(producer_id: bytes, sequence: int, buckets: int) -> int:
    """The bucket an append-only table's write goes to: each producer's writes rotate
    over the buckets (so each takes an equal share of the load), and a retried write
    (same producer, same sequence) goes where the first attempt went."""
    return (zlib.crc32(producer_id) + sequence) % buckets


def spread(meta: TableMeta, table: pa.Table, buckets: Sequence[int] | None = None) -> list[tuple[str, int, np.ndarray]]:
    """(partition, bucket, row indices) of an append-only table's rows: each partition's
    rows in equal runs over ``buckets`` (all by default): by load, with no key to hash."""
    buckets = list(range(meta.require_bucket_index())) if buckets is None else list(buckets)
    codes, partitions = _partition_codes(meta, table)
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]]) if len(order) else []
    groups = []
    for a, b in zip(starts, np.r_[starts[1:], len(order)], strict=True):
        runs = np.array_split(order[a:b], min(len(buckets), b - a))
        for bucket, rows in zip(buckets, runs, strict=False):
            groups.append((partitions[int(sorted_codes[a])], bucket, rows))
    return groups


def keep_latest(
    table: pa.Table,
    keys: pa.Array,
    integer_keys: np.ndarray | None,
    ordering: str | None,
    rows: np.ndarray,
    *,
    unique: bool,
    sort: bool,
) -> np.ndarray:
    """``rows`` (in write order) reduced to one per key, as Hudi's pre-combine does
    (greatest ordering value, later rows winning ties), and sorted by the integer key
    when ``sort`` (base files are, so merges can binary-search them)."""
    if not unique:
        values = table.column(ordering).take(pa.array(rows)).combine_chunks() if ordering else None
        keep = latest_per_key(keys.take(pa.array(rows)), values, np.arange(len(rows), dtype=np.int64))
        rows = rows if keep is None else np.sort(rows[keep])
    if sort and integer_keys is not None:
        by_key = _key_order(integer_keys[rows])
        rows = rows if by_key is None else rows[by_key]
    return rows


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
    there. Upserts keep one row per key (:func:`keep_latest`); rows for a new file group
    (its base file) are sorted by key when the key is one integer column.
    """
    if meta.keyless:
        if deletes:
            raise InvalidArgumentError(f"table {meta.config.name} is append-only: it has no record key to delete by")
        return [
            FileGroupChange(partition, existing.get((partition, bucket)) or bucket_file_id(bucket),
                            upserts=table.take(pa.array(rows)))
            for partition, bucket, rows in spread(meta, table)
        ]
    located = locate(meta, table, integer_keys=not deletes)
    unique = deletes or all_unique(located.keys, located.integer_keys)
    ordering = meta.merge_spec.ordering_column
    targets, selections = [], []
    for partition, bucket, rows in located.groups:
        new_group = (partition, bucket) not in existing
        rows = keep_latest(
            table, located.keys, located.integer_keys, ordering, rows, unique=unique, sort=new_group
        )
        targets.append((partition, existing.get((partition, bucket)) or bucket_file_id(bucket)))
        selections.append(rows)
    chosen = pa.array(np.concatenate(selections)) if selections else pa.array([], pa.int64())
    chosen_keys = located.keys.take(chosen)
    if deletes:
        changes, offset = [], 0
        for (partition, file_id), rows in zip(targets, selections, strict=True):
            group_keys = chosen_keys.slice(offset, len(rows))
            changes.append(FileGroupChange(partition, file_id, deleted_keys=pc.unique(group_keys)))
            offset += len(rows)
        return changes
    chosen_rows = table.take(chosen)
    changes, offset = [], 0
    for (partition, file_id), rows in zip(targets, selections, strict=True):
        changes.append(
            FileGroupChange(
                partition, file_id,
                upserts=chosen_rows.slice(offset, len(rows)),
                record_keys=chosen_keys.slice(offset, len(rows)),
            )
        )
        offset += len(rows)
    return changes
