"""Cleaning: deleting file slices that retention no longer keeps.

A clean keeps, in every file group, its latest ``retain_versions`` slices, plus every
slice a reader may still be reading: for each leased instant (a read in progress at that
instant), the two latest slices whose base instant is at or before it (the second one in
case a compaction that was pending when the read began has completed since). Slices of
pending compactions and clusterings are among the latest, so they are kept too. A file
group replaced by a clustering goes once no lease is older than the replacement.

Hudi's ``KEEP_LATEST_FILE_VERSIONS`` policy: the plan (:class:`CleanerPlan`) is recorded
before anything is deleted, so an interrupted clean is finished from it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from memtier.hudi.fsview import FileSlice, FileSystemView
from memtier.hudi.plans import KEEP_LATEST_FILE_VERSIONS, CleanerPlan, CleanMetadata
from memtier.hudi.tablemeta import TableMeta
from memtier.io import join

__all__ = ["CleanPolicy", "clean", "plan_clean"]


@dataclass(frozen=True)
class CleanPolicy:
    """How many file slices of each file group a clean keeps (the latest ones)."""

    retain_versions: int = 3


def _files(slice_: FileSlice) -> list[str]:
    names = [slice_.base_file.name] if slice_.base_file is not None else []
    return names + [f.name for f in slice_.log_files]


def _kept(slices: tuple[FileSlice, ...], retain: int, leases: Collection[str]) -> set[str]:
    """Base instants of the slices to keep."""
    kept = {s.base_instant for s in slices[-retain:]}
    for leased in leases:
        at_or_before = [s.base_instant for s in slices if s.base_instant <= leased]
        kept.update(at_or_before[-2:])
    return kept


def plan_clean(view: FileSystemView, policy: CleanPolicy, leases: Collection[str] = ()) -> CleanerPlan | None:
    """The files a clean deletes (None when there are none); ``view`` is built with
    ``keep_replaced``, ``leases`` are the instants reads in progress read at."""
    if policy.retain_versions < 1:
        raise ValueError(f"a clean keeps at least one file slice, not {policy.retain_versions}")
    files: dict[str, list[str]] = {}
    oldest_lease = min(leases, default=None)
    for (partition, file_id), group in sorted(view.file_groups.items()):
        replaced_by = view.replaced.get((partition, file_id))
        if replaced_by is not None:
            if oldest_lease is None or oldest_lease >= replaced_by:
                for slice_ in group.slices:
                    files.setdefault(partition, []).extend(_files(slice_))
            continue
        if (partition, file_id) in view.pending_clustering:
            continue  # its files are being rewritten
        kept = _kept(group.slices, policy.retain_versions, leases)
        for slice_ in group.slices:
            if slice_.base_instant not in kept:
                files.setdefault(partition, []).extend(_files(slice_))
    if not files:
        return None
    return CleanerPlan(KEEP_LATEST_FILE_VERSIONS, {p: tuple(n) for p, n in files.items()})


def clean(meta: TableMeta, instant: str, plan: CleanerPlan, last_completed: str = "") -> CleanMetadata:
    """Delete the plan's files (a file already gone counts as deleted: a re-executed
    clean finds them so); what was deleted, as the completed clean records it."""
    deleted: dict[str, tuple[str, ...]] = {}
    failed: dict[str, tuple[str, ...]] = {}
    for partition, names in plan.files.items():
        done, bad = [], []
        for name in names:
            try:
                meta.io.delete(join(meta.base_path, partition, name) if partition else join(meta.base_path, name))
                done.append(name)
            except OSError:
                bad.append(name)
        deleted[partition] = tuple(done)
        if bad:
            failed[partition] = tuple(bad)
    return CleanMetadata(instant, plan.policy, deleted, failed, last_completed_commit=last_completed)
