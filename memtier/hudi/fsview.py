"""The file-system view: which files make up each file group as of an instant.

Built from one listing of the table's partitions and the timeline, following Hudi's rules:

* a base file counts only when its instant is a completed commit at or before ``as_of``;
* log files join the slice of their base instant (layout 1) or, on layout 2, the slice
  with the greatest base instant at or before their own instant;
* slices whose base instant is after ``as_of`` do not exist yet; a slice opened by a
  pending compaction has no base file yet, so its logs extend the previous slice;
* file groups replaced by a completed replacecommit (insert overwrite, clustering) vanish.

Blocks inside log files are filtered later, by the reader, against the same timeline.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from memtier.hudi.filenames import BaseFile, LogFile, classify
from memtier.hudi.timeline import Timeline
from memtier.io import FileInfo, FileIO, basename, join, parent, relpath

__all__ = ["FileGroup", "FileSlice", "FileSystemView", "list_data_files"]

_HOODIE_DIR = ".hoodie"


@dataclass(frozen=True)
class FileSlice:
    """A base file (or none, for log-only groups) and the log files written after it."""

    partition_path: str
    file_id: str
    base_instant: str
    base_file: BaseFile | None = None
    log_files: tuple[LogFile, ...] = ()

    def base_file_path(self, base_path: str) -> str | None:
        if self.base_file is None:
            return None
        return join(base_path, self.partition_path, self.base_file.name)

    def log_file_paths(self, base_path: str) -> list[str]:
        return [join(base_path, self.partition_path, f.name) for f in self.log_files]

    @property
    def is_empty(self) -> bool:
        return self.base_file is None and not self.log_files


@dataclass(frozen=True)
class FileGroup:
    """All slices of one file group, oldest first."""

    partition_path: str
    file_id: str
    slices: tuple[FileSlice, ...]

    @property
    def latest(self) -> FileSlice:
        return self.slices[-1]


@dataclass(frozen=True)
class _Listing:
    """Data files of one file group, straight from the listing."""

    base_files: list[BaseFile] = field(default_factory=list)
    log_files: list[LogFile] = field(default_factory=list)


def list_data_files(io: FileIO, base_path: str) -> list[FileInfo]:
    """Every file below the table's partitions (``.hoodie`` and other hidden folders skipped)."""
    files: list[FileInfo] = []
    for entry in io.list_dir(base_path):
        if entry.is_dir:
            if not entry.name.startswith("."):
                files.extend(io.list_files(entry.path))
        else:
            files.append(entry)
    return files


def _group_files(base_path: str, files: Iterable[FileInfo]) -> dict[tuple[str, str], _Listing]:
    groups: dict[tuple[str, str], _Listing] = defaultdict(_Listing)
    for info in files:
        parsed = classify(basename(info.path))
        if parsed is None:
            continue
        partition = relpath(base_path, parent(info.path))
        listing = groups[(partition, parsed.file_id)]
        if isinstance(parsed, BaseFile):
            listing.base_files.append(parsed)
        else:
            listing.log_files.append(parsed)
    return groups


@dataclass(frozen=True)
class FileSystemView:
    """File groups of a table as of one instant."""

    base_path: str
    as_of: str | None
    file_groups: Mapping[tuple[str, str], FileGroup]

    @classmethod
    def build(
        cls,
        io: FileIO,
        base_path: str,
        timeline: Timeline,
        as_of: str | None = None,
        partition_filter: Callable[[str], bool] | None = None,
        files: Iterable[FileInfo] | None = None,
    ) -> FileSystemView:
        """List the table (unless ``files`` is given) and apply the timeline as of ``as_of``."""
        listing = _group_files(base_path, list_data_files(io, base_path) if files is None else files)
        visible = timeline if as_of is None else timeline.completed_as_of(as_of)
        replaced = _replaced_file_groups(io, base_path, visible)
        pending_compactions = {i.timestamp for i in timeline.pending(("compaction",))}
        groups: dict[tuple[str, str], FileGroup] = {}
        for (partition, file_id), files_of_group in sorted(listing.items()):
            if (partition, file_id) in replaced:
                continue
            if partition_filter is not None and not partition_filter(partition):
                continue
            slices = _slices(
                partition, file_id, files_of_group, visible, as_of,
                pending_compactions, timeline.layout_version,
            )
            if slices:
                groups[(partition, file_id)] = FileGroup(partition, file_id, tuple(slices))
        return cls(base_path, as_of, groups)

    def latest_slices(self) -> list[FileSlice]:
        return [g.latest for g in self.file_groups.values()]

    def partitions(self) -> list[str]:
        return sorted({p for p, _ in self.file_groups})

    def latest_slice(self, partition: str, file_id: str) -> FileSlice | None:
        group = self.file_groups.get((partition, file_id))
        return group.latest if group is not None else None


def _replaced_file_groups(io: FileIO, base_path: str, visible: Timeline) -> set[tuple[str, str]]:
    replaced: set[tuple[str, str]] = set()
    for instant in visible.completed(("replacecommit",)):
        metadata = visible.read_commit_metadata(io, base_path, instant)
        for partition, file_ids in metadata.partition_to_replace_file_ids.items():
            replaced.update((partition, f) for f in file_ids)
    return replaced


def _slices(
    partition: str,
    file_id: str,
    files: _Listing,
    visible: Timeline,
    as_of: str | None,
    pending_compactions: set[str],
    layout_version: int,
) -> list[FileSlice]:
    """The file group's slices, oldest first, as of ``as_of``."""

    def in_range(instant: str) -> bool:
        return as_of is None or instant <= as_of

    bases = {b.instant: b for b in files.base_files if visible.is_completed(b.instant)}
    slice_instants = set(bases)
    if layout_version == 1:
        slice_instants.update(log.base_instant for log in files.log_files)
    slice_instants = {t for t in slice_instants if in_range(t)}
    ordered = sorted(slice_instants)
    logs_by_slice: dict[str, list[LogFile]] = defaultdict(list)
    for log in files.log_files:
        if layout_version == 1:
            owner = log.base_instant
        else:  # layout 2: the log's own instant; it joins the newest slice started before it
            earlier = [t for t in ordered if t <= log.base_instant]
            owner = earlier[-1] if earlier else log.base_instant
            if not earlier and in_range(owner):
                ordered = sorted({*ordered, owner})
        if owner in slice_instants or owner in ordered:
            logs_by_slice[owner].append(log)
    slices: list[FileSlice] = []
    for instant in ordered:
        logs = tuple(sorted(logs_by_slice.get(instant, ()), key=LogFile.sort_key))
        base = bases.get(instant)
        if base is None and instant in pending_compactions and slices:
            previous = slices.pop()  # compaction not done yet: extend the previous slice
            slices.append(
                FileSlice(
                    partition, file_id, previous.base_instant, previous.base_file,
                    previous.log_files + logs,
                )
            )
            continue
        candidate = FileSlice(partition, file_id, instant, base, logs)
        if not candidate.is_empty:
            slices.append(candidate)
    return slices
