"""A plain-Python model of a keyed Hudi table: what every reader must return.

It keeps what Hudi keeps, per file group (partition, bucket): a base version of each key
and, for merge-on-read, the log written since. Reads apply Hudi's merge record by record
(a log fold, then a merge with the base; see ``memtier.hudi.merge``), copy-on-write
applies it at every commit. Bucket ids use its own Java ``List<String>.hashCode``, so the
model shares no code with what it checks.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Row = dict[str, Any]


def _java_string_hash(text: str) -> int:
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h


def bucket_of(values: Sequence[str], buckets: int) -> int:
    """Hudi's bucket: ``(List<String>.hashCode & Integer.MAX_VALUE) % buckets``."""
    h = 1
    for value in values:
        h = (31 * h + _java_string_hash(value)) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % buckets


def _key_string(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Version:
    row: Row
    ordering: Any
    commit: int


_DELETE = "delete"
_ORDERED_DELETE = "ordered-delete"


@dataclass(frozen=True)
class Tombstone:
    """An ordered delete in the log: it ends a version of its key of a lower (or equal)
    ordering value, and a later version must reach its ordering value to come back."""

    ordering: Any


@dataclass
class _FileGroup:
    base_commit: int
    base: dict[Hashable, Version]
    log: list[tuple[int, str, Any]] = field(default_factory=list)  # (commit, kind, payload)


@dataclass
class TableModel:
    key_fields: tuple[str, ...]
    ordering_field: str | None
    partition_fields: tuple[str, ...] = ()
    buckets: int = 1
    copy_on_write: bool = False
    groups: dict[Hashable, _FileGroup] = field(default_factory=dict)

    # -- writes -----------------------------------------------------------------------
    def key(self, row: Mapping[str, Any]) -> Hashable:
        return tuple(row[f] for f in self.key_fields)

    def _group(self, row: Mapping[str, Any]) -> Hashable:
        partition = tuple(row[f] for f in self.partition_fields)
        bucket = bucket_of([_key_string(row[f]) for f in self.key_fields], self.buckets)
        return partition, bucket

    def _ordering(self, row: Mapping[str, Any]) -> Any:
        return row[self.ordering_field] if self.ordering_field else 0

    def upsert(self, commit: int, batch: Iterable[Row]) -> None:
        chosen: dict[Hashable, Version] = {}
        for row in batch:  # pre-combine: greatest ordering, later rows winning ties
            k = self.key(row)
            if k not in chosen or self._ordering(row) >= chosen[k].ordering:
                chosen[k] = Version(dict(row), self._ordering(row), commit)
        by_group: dict[Hashable, dict[Hashable, Version]] = {}
        for k, version in chosen.items():
            by_group.setdefault(self._group(version.row), {})[k] = version
        for g, versions in by_group.items():
            self._apply(g, commit, "upsert", versions)

    def delete(self, commit: int, rows: Iterable[Mapping[str, Any]], *, ordered: bool = False) -> None:
        """Deletes in commit order, or (``ordered``: each row's ordering value, one row a
        key) decided against the key's versions by ordering value, as upserts are."""
        if ordered:
            tombstones: dict[Hashable, dict[Hashable, Tombstone]] = {}
            for row in rows:
                tombstones.setdefault(self._group(row), {})[self.key(row)] = Tombstone(self._ordering(row))
            for g, payload in tombstones.items():
                self._apply(g, commit, _ORDERED_DELETE, payload)
            return
        by_group: dict[Hashable, set[Hashable]] = {}
        for row in rows:
            by_group.setdefault(self._group(row), set()).add(self.key(row))
        for g, keys in by_group.items():
            if g in self.groups:  # deleting from a file group that does not exist: no-op
                self._apply(g, commit, _DELETE, keys)

    def _apply(self, g: Hashable, commit: int, kind: str, payload: Any) -> None:
        group = self.groups.get(g)
        if group is None and kind == _ORDERED_DELETE and not self.copy_on_write:
            self.groups[g] = _FileGroup(commit, {}, [(commit, kind, payload)])  # a log-only file group
        elif group is None:
            self.groups[g] = _FileGroup(commit, {} if kind == _ORDERED_DELETE else dict(payload))
        elif self.copy_on_write:
            group.base = self._merge(group.base, [(commit, kind, payload)])
        else:
            group.log.append((commit, kind, payload))

    def compact(self) -> None:
        """Each file group's log merged into its base, as a compaction does (ordered
        deletes leave nothing behind)."""
        for group in self.groups.values():
            group.base = self._merge(group.base, group.log)
            group.log = []

    # -- Hudi's merge -----------------------------------------------------------------
    def _wins(self, new: Any, current: Version | Tombstone | str | None) -> bool:
        if current is None or current == _DELETE or self.ordering_field is None:
            return True
        return new >= current.ordering

    def _merge(self, base: Mapping[Hashable, Version], log: Sequence[tuple[int, str, Any]]) -> dict:
        buffer: dict[Hashable, Version | Tombstone | str] = {}
        for _commit, kind, payload in log:
            if kind == _DELETE:
                buffer.update(dict.fromkeys(payload, _DELETE))
                continue
            for k, version in payload.items():  # a Version, or a Tombstone
                if self._wins(version.ordering, buffer.get(k)):
                    buffer[k] = version
        merged = dict(base)
        for k, state in buffer.items():
            if state == _DELETE:
                merged.pop(k, None)
            elif isinstance(state, Tombstone):
                if k in merged and self._wins(state.ordering, merged[k]):
                    del merged[k]
            elif k not in merged or self._wins(state.ordering, merged[k]):
                merged[k] = state
        return merged

    # -- reads ------------------------------------------------------------------------
    def versions(self, start: int = 0, end: int | None = None) -> list[Version]:
        """Live versions; with a range, only what commits in (start, end] wrote is merged
        (hudi-rs's incremental read of merge-on-read tables)."""

        def in_range(commit: int) -> bool:
            return start < commit and (end is None or commit <= end)

        out: list[Version] = []
        for group in self.groups.values():
            if start == 0 and end is None:
                out.extend(self._merge(group.base, group.log).values())
                continue
            base = group.base if in_range(group.base_commit) else {}
            log = [entry for entry in group.log if in_range(entry[0])]
            out.extend(v for v in self._merge(base, log).values() if in_range(v.commit))
        return out

    def rows(self) -> list[Row]:
        return [v.row for v in self.versions()]

    def changed_since(self, start: int, end: int) -> list[Row]:
        """Live rows whose current version was written by a commit in (start, end]
        (memtier's and Java Hudi's incremental read)."""
        return [v.row for v in self.versions() if start < v.commit <= end]

    def hudi_rs_incremental(self, start: int, end: int) -> list[Row]:
        """hudi-rs's incremental read of a merge-on-read table (on copy-on-write tables it
        returns :meth:`changed_since`)."""
        assert not self.copy_on_write
        return [v.row for v in self.versions(start, end)]


def project(rows: Iterable[Mapping[str, Any]], columns: list[str]) -> list[tuple]:
    tuples = [tuple(r[c] for c in columns) for r in rows]
    return sorted(tuples, key=lambda t: tuple(repr(v) for v in t))
