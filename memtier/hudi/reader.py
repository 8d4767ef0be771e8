"""Table reads: snapshot, read-optimized, incremental and time travel, with projection,
partition pruning and filters. File slices are read and merged in parallel threads
(Parquet decoding and the vectorized merge release the GIL)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

from memtier.errors import InvalidArgumentError, UnknownColumnError
from memtier.hudi.avro import META_FIELDS
from memtier.hudi.cache import SliceCache
from memtier.hudi.filenames import bucket_or_none
from memtier.hudi.filters import (
    Filter,
    filtered,
    key_buckets,
    key_filters,
    partition_predicate,
    validate,
)
from memtier.hudi.fsview import FileSlice, FileSystemView
from memtier.hudi.keyread import KeyFilter, warm_footers
from memtier.hudi.merge import LogEntry
from memtier.hudi.properties import BUCKET_HASH_FIELD
from memtier.hudi.slicereader import SliceFiles, merge_slice, read_slice_files
from memtier.hudi.tablemeta import COMMIT_TIME, RECORD_KEY, TableMeta
from memtier.hudi.timeline import Timeline
from memtier.parallel import Prefetch, parallel_map

__all__ = ["READ_MODES", "normalize_instant", "read_columns", "read_instants", "read_table"]

READ_MODES = ("snapshot", "read_optimized", "incremental")
_INSTANT = re.compile(r"\d{14}(\d{3})?")


def normalize_instant(value: str | datetime | None, name: str) -> str | None:
    """An instant bound as 17 digits: accepts Hudi instant strings and datetimes (UTC)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        utc = value.astimezone(UTC) if value.tzinfo else value
        return utc.strftime("%Y%m%d%H%M%S") + f"{utc.microsecond // 1000:03d}"
    if isinstance(value, str) and _INSTANT.fullmatch(value):
        return value if len(value) == 17 else value + "999"
    raise InvalidArgumentError(
        f"{name} must be a Hudi instant (yyyyMMddHHmmss[SSS]) or a datetime, got {value!r}"
    )


def read_instants(
    mode: str, as_of: str | datetime | None, start: str | datetime | None, end: str | datetime | None
) -> tuple[str | None, str | None, str | None]:
    """A read's (as_of, start, end) as 17-digit instants; a clear error where they do not
    fit the mode (start/end belong to incremental reads, which need a start)."""
    as_of_ts = normalize_instant(as_of, "as_of")
    start_ts, end_ts = normalize_instant(start, "start"), normalize_instant(end, "end")
    if mode == "incremental":
        if start_ts is None:
            raise InvalidArgumentError("an incremental read needs start (exclusive)")
        if as_of_ts is not None:
            raise InvalidArgumentError("an incremental read takes start/end, not as_of")
    elif start_ts is not None or end_ts is not None:
        raise InvalidArgumentError(f"start/end apply to incremental reads, not {mode!r}")
    return as_of_ts, start_ts, end_ts


def _output_columns(meta: TableMeta, columns: Sequence[str] | None, include_meta: bool) -> list[str]:
    data = meta.schema.names
    if columns is None:
        return [*META_FIELDS, *data] if include_meta else list(data)
    if isinstance(columns, str):
        raise InvalidArgumentError(f"columns must be a list of names, got the string {columns!r}")
    known = set(data) | set(META_FIELDS)
    unknown = [c for c in columns if c not in known]
    if unknown:
        raise UnknownColumnError(f"columns {unknown} are not in the table {data}")
    chosen = list(dict.fromkeys(columns))
    return [*[m for m in META_FIELDS if m not in chosen], *chosen] if include_meta else chosen


def read_columns(
    meta: TableMeta,
    *,
    mode: str = "snapshot",
    columns: Sequence[str] | None = None,
    filters: Sequence[Filter] | None = None,
    include_meta: bool = False,
) -> list[str]:
    """The file columns a read loads: the projection, filter columns, merge key, ordering."""
    checked = validate(filters, [*META_FIELDS, *meta.schema.names])
    return _needed_columns(meta, _output_columns(meta, columns, include_meta), checked, mode)


def _needed_columns(
    meta: TableMeta, wanted: Sequence[str], filters: Sequence[Filter], mode: str
) -> list[str]:
    needed = set(wanted) | {f[0] for f in filters}
    if mode != "read_optimized":
        needed.add(meta.merge_spec.key_column)
        if meta.merge_spec.ordering_column:
            needed.add(meta.merge_spec.ordering_column)
    if mode == "incremental":
        needed.add(COMMIT_TIME)
    return [name for name in meta.file_schema.names if name in needed]


def _touched_file_groups(meta: TableMeta, timeline: Timeline, start: str, end: str) -> set[tuple[str, str]]:
    touched: set[tuple[str, str]] = set()
    for instant in timeline.completed():
        if start < instant.timestamp <= end:
            metadata = timeline.read_commit_metadata(meta.io, meta.base_path, instant)
            for partition, stats in metadata.partition_to_write_stats.items():
                touched.update((partition, s.file_id) for s in stats)
    return touched


def _read_slices(
    meta: TableMeta,
    view: FileSystemView,
    slices: list[FileSlice],
    visible: Timeline,
    columns: list[str],
    with_logs: bool,
    extra: Mapping[tuple[str, str], Sequence[LogEntry]] | Prefetch[Mapping[tuple[str, str], Sequence[LogEntry]]],
    cache: SliceCache | None,
    key_filter: KeyFilter | None,
    selected: Callable[[list[FileSlice]], list[FileSlice]],
) -> list[pa.Table]:
    """Each slice's live rows; then those of file groups only ``extra`` holds (of the
    ``selected`` slices). ``extra`` still to fetch is fetched while the files are read:
    a key read (a few rows a slice, one slice after another) reads every slice's files
    before it waits for it; a scan reads and merges each slice in one step on the pool's
    threads (so it holds one slice's files at a time per thread), the first slice to
    merge waiting for it."""
    if isinstance(extra, Prefetch) and slices:
        extra.start()
    held = _Held(extra, view)

    def files_of(slice_: FileSlice) -> SliceFiles:
        return read_slice_files(
            meta, slice_, visible, columns, with_logs=with_logs, cache=cache, key_filter=key_filter,
            log_sizes=[view.size_of(slice_.partition_path, f.name) for f in slice_.log_files],
        )

    def merged(slice_: FileSlice, files: SliceFiles) -> pa.Table | None:
        return merge_slice(meta, files, held.of(slice_), key_filter) if with_logs else files.base

    if key_filter is not None:  # threads would cost more than a row group or two saves
        read = [files_of(s) for s in slices]
        tables = [merged(s, f) for s, f in zip(slices, read, strict=True)]
    else:
        tables = parallel_map(lambda s: merged(s, files_of(s)), slices)
    if with_logs:
        listed = {(s.partition_path, s.file_id) for s in view.latest_slices()}
        only_held = selected([FileSlice(p, f, "") for p, f in sorted(held.groups()) if (p, f) not in listed])
        def held_only(slice_: FileSlice) -> pa.Table | None:
            return merged(slice_, SliceFiles(None, []))

        tables += [held_only(s) for s in only_held] if key_filter is not None else parallel_map(held_only, only_held)
    return [t for t in tables if t is not None and t.num_rows]


class _Held:
    """A read's rows not in the files yet, by the file group holding them now
    (:func:`_current_groups`); waited for once, by whichever slice needs them first."""

    def __init__(self, extra: Mapping[tuple[str, str], Sequence[LogEntry]]
                 | Prefetch[Mapping[tuple[str, str], Sequence[LogEntry]]], view: FileSystemView) -> None:
        self._extra = extra
        self._view = view
        self._lock = threading.Lock()
        self._groups: dict[tuple[str, str], list[LogEntry]] | None = None

    def groups(self) -> dict[tuple[str, str], list[LogEntry]]:
        with self._lock:
            if self._groups is None:
                extra = self._extra.result() if isinstance(self._extra, Prefetch) else self._extra
                self._groups = _current_groups(extra, self._view)
            return self._groups

    def of(self, slice_: FileSlice) -> list[LogEntry]:
        return self.groups().get((slice_.partition_path, slice_.file_id), [])


def read_table(
    meta: TableMeta,
    *,
    mode: str = "snapshot",
    as_of: str | datetime | None = None,
    start: str | datetime | None = None,
    end: str | datetime | None = None,
    columns: Sequence[str] | None = None,
    filters: Sequence[Filter] | None = None,
    include_meta: bool = False,
    extra: Mapping[tuple[str, str], Sequence[LogEntry]]
    | Prefetch[Mapping[tuple[str, str], Sequence[LogEntry]]] | None = None,
    buckets: Collection[int] | None = None,
    cache: SliceCache | None = None,
    timeline: Timeline | None = None,
) -> pa.Table:
    """Read the table; see :meth:`memtier.hudi.HudiTable.read`.

    ``extra`` adds log entries per file group ``(partition, file_id)`` after its log
    files (rows held by table servers, not yet flushed); file groups that exist only
    there are read too. Entries must hold :func:`read_columns` of the same request. A
    :class:`~memtier.parallel.Prefetch` of them (the table servers' answer) is fetched
    while the files are read.
    Equalities on every record-key column of a bucket-indexed table read only the
    buckets of those keys (as do ``buckets``, when given). ``timeline``: the table's
    timeline when the caller has just listed it (else it is listed here).
    """
    if mode not in READ_MODES:
        raise InvalidArgumentError(f"mode must be one of {READ_MODES}, got {mode!r}")
    as_of_ts, start_ts, end_ts = read_instants(mode, as_of, start, end)
    wanted = _output_columns(meta, columns, include_meta)
    checked = validate(filters, [*META_FIELDS, *meta.schema.names])
    timeline = timeline if timeline is not None else meta.timeline()
    point = as_of_ts
    if mode == "incremental":
        last = timeline.last_completed()
        point = end_ts or (last.timestamp if last else start_ts)
    visible = timeline.completed_as_of(point) if point is not None else timeline
    predicate = partition_predicate(
        checked, meta.config.partition_fields, meta.config.hive_style_partitioning, meta.physical
    )
    key_filter = KeyFilter.of(key_filters(checked, [*meta.config.record_key_fields, RECORD_KEY]))
    view = _view(meta, timeline, point, predicate, cache, warm=key_filter is not None)
    pinned = _key_buckets(meta, checked) if buckets is None else set(buckets)
    touched = (_touched_file_groups(meta, visible, start_ts, point)  # type: ignore[arg-type]
               if mode == "incremental" else None)

    def selected(slices: list[FileSlice]) -> list[FileSlice]:
        return [
            s for s in slices
            if (predicate is None or predicate(s.partition_path))
            and (pinned is None or bucket_or_none(s.file_id) in pinned)
            and (touched is None or (s.partition_path, s.file_id) in touched)
        ]

    needed = _needed_columns(meta, wanted, checked, mode)
    tables = _read_slices(meta, view, selected(view.latest_slices()), visible, needed, mode != "read_optimized",
                          extra or {}, cache, key_filter, selected)
    file_schema = pa.schema([meta.file_schema.field(n) for n in needed])
    result = pa.concat_tables(tables) if tables else file_schema.empty_table()
    if mode == "incremental":
        commit_time = result.column(COMMIT_TIME)
        in_range = pc.and_(pc.greater(commit_time, start_ts), pc.less_equal(commit_time, point))
        result = result.filter(in_range)
    if checked and (key_filter is None or len(key_filter.filters) < len(checked)):
        result = filtered(result, checked)  # (key filters alone ran before the merge: its rows pass)
    return _to_logical(result.select(wanted), meta)


def _view(meta: TableMeta, timeline: Timeline, point: str | None,
          predicate: Callable[[str], bool] | None, cache: SliceCache | None, *, warm: bool) -> FileSystemView:
    """The table's file-system view as of ``point``, of the partitions ``predicate``
    takes; with a ``cache``, the whole view is kept for the next read of the same
    timeline (every instant and state alike: files only become visible, replaced or
    cleaned through instants, so the same timeline lists the same slices), and with
    ``warm`` its base files' footers are read into the cache in the background."""
    if cache is None:
        return FileSystemView.build(meta.io, meta.base_path, timeline, as_of=point, partition_filter=predicate)

    def build() -> FileSystemView:
        view = FileSystemView.build(meta.io, meta.base_path, timeline, as_of=point)
        if warm:  # a read of a few keys: more will come, and each opens footers
            warm_footers(meta.io, [p for s in view.latest_slices() if (p := s.base_file_path(meta.base_path))], cache)
        return view

    view = cache.get(("view", meta.base_path, timeline.instants, point), build)
    return view if predicate is None else view.within(predicate)


def _key_buckets(meta: TableMeta, filters: Sequence[Filter]) -> set[int] | None:
    """The buckets ``=``/``in`` filters on every record-key column pin, on a table whose
    bucket index hashes the record key (None: read every file group)."""
    config = meta.config
    hashed = config.raw.get(BUCKET_HASH_FIELD)
    if not config.buckets or not config.record_key_fields or (
            hashed and hashed.split(",") != list(config.record_key_fields)):
        return None
    return key_buckets(filters, config.record_key_fields, meta.schema, config.buckets)


def _current_groups(
    extra: Mapping[tuple[str, str], Sequence[LogEntry]], view: FileSystemView
) -> dict[tuple[str, str], list[LogEntry]]:
    """``extra`` keyed by the file groups that hold those rows now: rows a table server
    holds for a file group a clustering replaced belong to its bucket's new file group. A
    table server sends each bucket's rows under one file group, in write order, however
    many it holds them in (``memtier.tableserver.reads``), so no two keys of ``extra``
    name one file group and their relative order is never decided here."""
    moved: dict[tuple[str, str], list[LogEntry]] = {}
    for (partition, file_id), entries in extra.items():
        moved.setdefault((partition, view.current_group(partition, file_id)), []).extend(entries)
    return moved


def _to_logical(table: pa.Table, meta: TableMeta) -> pa.Table:
    """Cast physical file types back to the types the table was created with."""
    target = pa.schema(
        [
            meta.schema.field(n) if n in meta.schema.names else table.schema.field(n)
            for n in table.column_names
        ]
    )
    return table if table.schema == target else table.cast(target)
