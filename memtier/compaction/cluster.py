"""Clustering: the file groups of a partition rewritten into fewer, larger ones, optionally
sorted by chosen columns, as a Hudi ``replacecommit`` that replaces the old file groups.

In a bucket-index table every key must live in the file group of its bucket, or readers
would see a key twice and writers would update the wrong group. So a clustering rewrites
whole partitions: all file groups of the partition go in, and out comes one file group per
bucket (of the table's current bucket count) holding exactly that bucket's rows, under a
new file id that starts with the bucket's eight digits (the form Hudi's bucket index looks
file groups up by). The policy clusters a partition on its own when it holds file groups
that do not fit that layout (more than one per bucket, a bucket beyond the bucket count, a
file id that names no bucket: left by a bucket count change or a backfill); a manual
clustering rewrites the partitions it is given (all by default), sorted by ``sort_columns``.

Writers are never stopped: a flush that lands in a file group under clustering makes the
clustering fail its conflict check (it is rolled back, nothing visible, and tried again
later); a flush that started before a clustering completed is refused and retried against
the new file groups (:meth:`memtier.master.master.Master.complete_flush`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from memtier.errors import InvalidArgumentError
from memtier.hudi.basefile import constant_column, sort_by_key, write_base_file
from memtier.hudi.commit import CommitMetadata, WriteStat
from memtier.hudi.filenames import BaseFile, bucket_or_none, new_bucket_file_id
from memtier.hudi.fsview import FileSlice, FileSystemView
from memtier.hudi.keys import KeyColumns
from memtier.hudi.plans import ClusteringGroup, ClusteringPlan, SliceInfo
from memtier.hudi.slicereader import read_slice
from memtier.hudi.tablemeta import FILE_NAME, RECORD_KEY, TableMeta
from memtier.hudi.timeline import Timeline
from memtier.hudi.writer import commit_metadata
from memtier.io import join
from memtier.parallel import parallel_map

__all__ = ["cluster", "clustering_metadata", "plan_clustering"]

#: Hudi's operation type of a clustering's replacecommit.
CLUSTER_OPERATION = "CLUSTER"
#: Rows of one output file group of a table without a bucket index.
_TARGET_ROWS = 4_000_000


def _misfit(view: FileSystemView, partition: str, buckets: int) -> bool:
    """Whether the partition's file groups break the one-per-bucket layout."""
    seen: set[int] = set()
    for p, file_id in view.file_groups:
        if p != partition:
            continue
        bucket = bucket_or_none(file_id)
        if bucket is None or bucket >= buckets or bucket in seen:
            return True
        seen.add(bucket)
    return False


def plan_clustering(
    meta: TableMeta,
    view: FileSystemView,
    *,
    busy: Collection[tuple[str, str]] = (),
    partitions: Sequence[str] | None = None,
    sort_columns: Sequence[str] = (),
    force: bool = False,
) -> ClusteringPlan | None:
    """One clustering group per partition to rewrite, or None. Without ``force`` only
    partitions whose file groups break the bucket layout; with it, those in
    ``partitions`` (None: all). A partition with a file group that is busy (a pending
    write, compaction or clustering touches it) waits for a later plan."""
    unknown = [c for c in sort_columns if c not in meta.physical.names]
    if unknown:
        raise InvalidArgumentError(f"sort columns {unknown} are not columns of {meta.config.name}")
    buckets = meta.config.buckets
    by_partition: dict[str, list[FileSlice]] = {}
    for (partition, _), group in sorted(view.file_groups.items()):
        by_partition.setdefault(partition, []).append(group.latest)
    groups = []
    for partition, slices in by_partition.items():
        if partitions is not None and partition not in partitions:
            continue
        keys = [(s.partition_path, s.file_id) for s in slices]
        if any(k in busy or k in view.pending_compaction or k in view.pending_clustering for k in keys):
            continue
        if not force and not (buckets and _misfit(view, partition, buckets)):
            continue
        infos = tuple(
            SliceInfo(partition, s.file_id, s.base_file.name if s.base_file else None,
                      tuple(f.name for f in s.log_files))
            for s in slices
        )
        size = sum(view.size_of(partition, n) for i in infos for n in ([i.base_file] if i.base_file else []))
        outputs = len({bucket_or_none(s.file_id) for s in slices}) if buckets else 1
        groups.append(ClusteringGroup(infos, max(1, outputs), {"TOTAL_SIZE": float(size)}))
    if not groups:
        return None
    return ClusteringPlan(tuple(groups), tuple(sort_columns))


def _ordered(rows: pa.Table, meta: TableMeta, sort_columns: Sequence[str]) -> pa.Table:
    """Rows sorted by ``sort_columns``, else by the record key (base files are kept in
    record-key order, by the key columns: see :func:`~memtier.hudi.basefile.sort_by_key`);
    an append-only table's by its generated record keys."""
    keys = list(meta.config.record_key_fields) or [RECORD_KEY]
    if not sort_columns:
        return sort_by_key(rows, keys)
    columns = [*sort_columns, *keys]
    return rows.take(pc.sort_indices(rows, sort_keys=[(c, "ascending") for c in columns]))


def _outputs(meta: TableMeta, rows: pa.Table) -> list[tuple[str, pa.Table]]:
    """(new file id, rows) of each output file group."""
    buckets = meta.config.buckets
    if not buckets:
        pieces = max(1, -(-rows.num_rows // _TARGET_ROWS))
        size = -(-rows.num_rows // pieces)
        return [(f"{uuid.uuid4()}-0", rows.slice(i * size, size)) for i in range(pieces)]
    if meta.keyless:  # append-only: equal runs over the buckets, as writes spread them
        ids = np.arange(rows.num_rows) * buckets // max(rows.num_rows, 1)
    else:
        ids = KeyColumns.of(rows, meta.config.record_key_fields).bucket_ids(buckets)
    out = []
    for bucket in np.unique(ids):
        out.append((new_bucket_file_id(int(bucket)), rows.filter(pa.array(ids == bucket))))
    return out


def cluster(
    meta: TableMeta, instant: str, plan: ClusteringPlan, visible: Timeline | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[WriteStat], list[tuple[str, str]]]:
    """Execute a clustering plan: the write stats of the new base files and the
    (partition, file id) of the file groups they replace."""
    timeline = visible if visible is not None else meta.timeline()
    columns = meta.file_schema.names
    stats: list[WriteStat] = []
    replaced: list[tuple[str, str]] = []
    for number, group in enumerate(plan.groups):
        slices = [FileSlice.of_names(i.partition_path, i.file_id, i.base_file, i.log_files) for i in group.slices]
        tables = [t for t in parallel_map(lambda s: read_slice(meta, s, timeline, columns), slices) if t is not None]
        rows = pa.concat_tables(tables) if tables else meta.file_schema.empty_table()
        rows = _ordered(rows, meta, plan.sort_columns)
        partition = group.slices[0].partition_path if group.slices else ""
        for task, (file_id, piece) in enumerate(_outputs(meta, rows)):
            name = BaseFile(file_id, f"{task}-{number}-0", instant).name
            piece = piece.set_column(piece.column_names.index(FILE_NAME), FILE_NAME,
                                     constant_column(name, piece.num_rows))
            relative = join(partition, name) if partition else name
            size = write_base_file(meta.io, join(meta.base_path, relative), piece, meta.filtered_key_fields)
            stats.append(WriteStat(
                file_id=file_id, path=relative, partition_path=partition, prev_commit="null",
                num_writes=piece.num_rows, num_inserts=piece.num_rows, num_update_writes=0, num_deletes=0,
                total_write_bytes=size, file_size=size,
            ))
        replaced.extend((s.partition_path, s.file_id) for s in group.slices)
        if progress is not None:
            progress(number + 1, len(plan.groups))
    return stats, replaced


def clustering_metadata(meta: TableMeta, stats: Sequence[WriteStat], replaced: Sequence[tuple[str, str]]) -> CommitMetadata:
    """The ``<t>.replacecommit`` content completing a clustering."""
    return commit_metadata(meta, stats, CLUSTER_OPERATION, replaced=replaced)
