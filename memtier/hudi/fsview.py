"""The file-system view: which files make up each file group as of an instant.

Built from one listing of the table's partitions and the timeline, following Hudi's rules:

* a base file counts only when its instant is a completed commit at or before ``as_of``;
* log files join the slice of their base instant (layout 1; as of an instant before it,
  the newest slice then: a backfill begun before a compaction was planned completes its
  log files into the slice that compaction opens, with blocks of its earlier instant) or,
  on layout 2 (named by their own deltacommit), as Hudi 1.x places them: the slice with
  the greatest base instant at or before the completion time of their deltacommit (the
  oldest slice if none is; the newest while their deltacommit is pending), so a log file
  that completed after a compaction was planned belongs to the slice it opens;
* slices whose base instant is after ``as_of`` do not exist yet; a slice opened by a
  pending compaction has no base file yet, so its logs extend the previous slice;
* file groups replaced by a completed replacecommit (insert overwrite, clustering) vanish.

The view also knows the file groups of pending compactions and clusterings (from their
plans): a log file written while a compaction is pending belongs to the slice that
compaction opens (:meth:`FileSystemView.slice_for_write`), as in Hudi.

Blocks inside log files are filtered later, by the reader, against the same timeline.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from memtier.errors import InvalidArgumentError, NotFoundError
from memtier.hudi.filenames import BaseFile, LogFile, bucket_or_none, classify, new_bucket_file_id
from memtier.hudi.plans import ClusteringPlan, CompactionPlan
from memtier.hudi.timeline import REPLACING_ACTIONS, Instant, State, Timeline
from memtier.io import FileInfo, FileIO, basename, join, parent, relpath

__all__ = ["FileGroup", "FileSlice", "FileSystemView", "list_data_files", "pending_clustering"]

_HOODIE_DIR = ".hoodie"


@dataclass(frozen=True)
class FileSlice:
    """A base file (or none, for log-only groups) and the log files written after it."""

    partition_path: str
    file_id: str
    base_instant: str
    base_file: BaseFile | None = None
    log_files: tuple[LogFile, ...] = ()
    #: opened by a pending compaction: its base file is being written
    compaction_pending: bool = False

    @classmethod
    def of_names(
        cls, partition: str, file_id: str, base_file: str | None, log_files: Iterable[str],
        base_instant: str | None = None,
    ) -> FileSlice:
        """The slice made of these files (names, as plans record them); its base instant
        is the base file's, else the logs' (layout 1), unless given."""
        base = BaseFile.parse(base_file) if base_file else None
        logs = tuple(sorted((LogFile.parse(n) for n in log_files), key=LogFile.sort_key))
        if base_instant is None:
            base_instant = base.instant if base is not None else (logs[0].base_instant if logs else "")
        return cls(partition, file_id, base_instant, base, logs)

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
    sizes: dict[str, int] = field(default_factory=dict)  # file name -> bytes


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
        listing.sizes[parsed.name] = info.size
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
    #: (partition, file id) -> instant of the pending compaction planned for it
    pending_compaction: Mapping[tuple[str, str], str] = field(default_factory=dict)
    #: (partition, file id) -> instant of the pending clustering that rewrites it
    pending_clustering: Mapping[tuple[str, str], str] = field(default_factory=dict)
    #: log files of slices opened by pending compactions, by file group
    pending_logs: Mapping[tuple[str, str], tuple[LogFile, ...]] = field(default_factory=dict)
    #: (partition, file name) -> bytes, for every data file listed
    file_sizes: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: (partition, file id) -> the completed replacecommit that replaced the file group
    replaced: Mapping[tuple[str, str], str] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """About what it takes in memory: a few small objects per file listed."""
        return 512 * len(self.file_sizes)

    @classmethod
    def build(
        cls,
        io: FileIO,
        base_path: str,
        timeline: Timeline,
        as_of: str | None = None,
        partition_filter: Callable[[str], bool] | None = None,
        files: Iterable[FileInfo] | None = None,
        *,
        keep_replaced: bool = False,
    ) -> FileSystemView:
        """List the table (unless ``files`` is given) and apply the timeline as of ``as_of``.
        With ``keep_replaced`` (for cleaning) replaced file groups stay in the view and
        :attr:`replaced` says by which instant."""
        listing = _group_files(base_path, list_data_files(io, base_path) if files is None else files)
        visible = timeline if as_of is None else timeline.completed_as_of(as_of)
        replaced = _replaced_file_groups(io, base_path, visible)
        pending_compactions = {i.timestamp for i in timeline.pending(("compaction",))}
        compacting = _pending_plans(io, base_path, timeline, "compaction", CompactionPlan.from_avro)
        clustering = pending_clustering(io, base_path, timeline)
        pending_logs = {
            key: tuple(sorted((f for f in files_of_group.log_files if f.base_instant == compacting[key]),
                              key=LogFile.sort_key))
            for key, files_of_group in listing.items() if key in compacting
        }
        completions = {i.timestamp: i.completion_time for i in visible.completed(None) if i.completion_time}
        groups: dict[tuple[str, str], FileGroup] = {}
        for (partition, file_id), files_of_group in sorted(listing.items()):
            if (partition, file_id) in replaced and not keep_replaced:
                continue
            if partition_filter is not None and not partition_filter(partition):
                continue
            if timeline.layout_version == 1:
                slices = _slices(partition, file_id, files_of_group, visible, as_of, pending_compactions)
            else:
                slices = _slices_by_completion(partition, file_id, files_of_group, visible, as_of,
                                               compacting.get((partition, file_id)), completions)
            if slices:
                groups[(partition, file_id)] = FileGroup(partition, file_id, tuple(slices))
        sizes = {(p, name): size for (p, _), files_of_group in listing.items()
                 for name, size in files_of_group.sizes.items()}
        return cls(base_path, as_of, groups, compacting, clustering, pending_logs, sizes, replaced)

    def size_of(self, partition: str, name: str) -> int:
        """Bytes of a listed data file (0 when it was not listed)."""
        return self.file_sizes.get((partition, name), 0)

    def slice_for_write(self, partition: str, file_id: str) -> FileSlice | None:
        """The slice a new log file of the file group joins: the latest, or the one a
        pending compaction opened (no base file yet) when there is one."""
        instant = self.pending_compaction.get((partition, file_id))
        if instant is not None:
            logs = self.pending_logs.get((partition, file_id), ())
            return FileSlice(partition, file_id, instant, None, logs, compaction_pending=True)
        return self.latest_slice(partition, file_id)

    def current_group(self, partition: str, file_id: str) -> str:
        """The file id that holds the rows of ``file_id`` now: itself while it exists;
        else (a clustering replaced it, or a writer named a new file group for a bucket
        that has one by now: an adopted table's conversion made them) the file group of
        the same bucket in the partition; else itself, or a fresh id for the bucket if
        it was replaced."""
        replaced = (partition, file_id) in self.replaced
        bucket = bucket_or_none(file_id)
        if bucket is None or ((partition, file_id) in self.file_groups and not replaced):
            return file_id
        for p, candidate in self.file_groups:
            if p == partition and bucket_or_none(candidate) == bucket and (p, candidate) not in self.replaced:
                return candidate
        return new_bucket_file_id(bucket) if replaced else file_id

    def within(self, keep: Callable[[str], bool]) -> FileSystemView:
        """This view restricted to the file groups of the partitions ``keep`` takes."""
        return replace(self, file_groups={k: g for k, g in self.file_groups.items() if keep(k[0])})

    def latest_slices(self) -> list[FileSlice]:
        return [g.latest for g in self.file_groups.values()]

    def partitions(self) -> list[str]:
        return sorted({p for p, _ in self.file_groups})

    def latest_slice(self, partition: str, file_id: str) -> FileSlice | None:
        group = self.file_groups.get((partition, file_id))
        return group.latest if group is not None else None


def pending_clustering(io: FileIO, base_path: str, timeline: Timeline) -> dict[tuple[str, str], str]:
    """(partition, file id) -> instant of each file group a pending clustering rewrites
    (read from the plans alone: no listing of the table); a clustering requests
    ``replacecommit`` on layout 1, ``clustering`` on layout 2."""
    found: dict[tuple[str, str], str] = {}
    for action in REPLACING_ACTIONS:
        found.update(_pending_plans(io, base_path, timeline, action, ClusteringPlan.from_avro))
    return found


def _pending_plans(
    io: FileIO, base_path: str, timeline: Timeline, action: str,
    decode: Callable[[bytes], CompactionPlan | ClusteringPlan],
) -> dict[tuple[str, str], str]:
    """(partition, file id) -> instant, for the file groups of every pending ``action``
    whose requested file holds a plan ``decode`` reads (other requests are skipped)."""
    found: dict[tuple[str, str], str] = {}
    for instant in timeline.pending((action,)):
        requested = timeline.instant_path(base_path, Instant(instant.timestamp, action, State.REQUESTED))
        try:
            content = io.read_bytes(requested)
            plan = decode(content) if content else None
        except (InvalidArgumentError, NotFoundError):
            plan = None  # an insert overwrite's request, or a plan that moved on
        if plan is not None:
            found.update(dict.fromkeys(plan.file_groups(), instant.timestamp))
    return found


def _replaced_file_groups(io: FileIO, base_path: str, visible: Timeline) -> dict[tuple[str, str], str]:
    replaced: dict[tuple[str, str], str] = {}
    for instant in visible.completed(("replacecommit",)):
        metadata = visible.read_commit_metadata(io, base_path, instant)
        for partition, file_ids in metadata.partition_to_replace_file_ids.items():
            replaced.update(dict.fromkeys(((partition, f) for f in file_ids), instant.timestamp))
    return replaced


def _slices(
    partition: str,
    file_id: str,
    files: _Listing,
    visible: Timeline,
    as_of: str | None,
    pending_compactions: set[str],
) -> list[FileSlice]:
    """The file group's slices on layout 1, oldest first, as of ``as_of``."""

    def in_range(instant: str) -> bool:
        return as_of is None or instant <= as_of

    bases = {b.instant: b for b in files.base_files if visible.is_completed(b.instant)}
    slice_instants = {t for t in (*bases, *(log.base_instant for log in files.log_files)) if in_range(t)}
    ordered = sorted(slice_instants)
    logs_by_slice: dict[str, list[LogFile]] = defaultdict(list)
    for log in files.log_files:
        owner = log.base_instant
        if not in_range(owner) and ordered:
            # the slice of a compaction planned after as_of: a log file a writer begun
            # before it completed into it holds blocks of instants up to as_of
            owner = ordered[-1]
        if owner in slice_instants:
            logs_by_slice[owner].append(log)
    return _assemble(partition, file_id, ordered, bases, logs_by_slice, pending_compactions)


def _slices_by_completion(
    partition: str,
    file_id: str,
    files: _Listing,
    visible: Timeline,
    as_of: str | None,
    pending_compaction: str | None,
    completions: Mapping[str, str],
) -> list[FileSlice]:
    """The file group's slices on layout 2, oldest first, as of ``as_of``: each log file
    (named by its deltacommit) in the slice Hudi 1.x's file group puts it in, by the
    deltacommit's completion time (``completions``: instant -> completion time)."""

    def in_range(instant: str) -> bool:
        return as_of is None or instant <= as_of

    bases = {b.instant: b for b in files.base_files if visible.is_completed(b.instant) and in_range(b.instant)}
    starts = set(bases)
    if not starts:  # a log-only file group: its first log file opens it
        starts.update(sorted(log.base_instant for log in files.log_files if in_range(log.base_instant))[:1])
    if pending_compaction and in_range(pending_compaction):
        starts.add(pending_compaction)
    ordered = sorted(starts)
    logs_by_slice: dict[str, list[LogFile]] = defaultdict(list)
    for log in files.log_files if ordered else ():
        completion = completions.get(log.base_instant)
        if completion is None:
            owner = ordered[-1]  # pending (or not visible as of as_of): the newest slice
        else:
            earlier = [t for t in ordered if t <= completion]
            owner = earlier[-1] if earlier else ordered[0]
        logs_by_slice[owner].append(log)
    pending = {pending_compaction} if pending_compaction else set()
    return _assemble(partition, file_id, ordered, bases, logs_by_slice, pending)


def _assemble(
    partition: str,
    file_id: str,
    ordered: list[str],
    bases: Mapping[str, BaseFile],
    logs_by_slice: Mapping[str, list[LogFile]],
    pending_compactions: Collection[str],
) -> list[FileSlice]:
    """Slices at the ``ordered`` instants with their base and log files; a slice a
    pending compaction opened (no base file yet) extends the one before it."""
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
