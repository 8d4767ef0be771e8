"""A plain-Python model of a keyed table: what every reader must return.

``TableModel`` applies writes sequentially (memtier's semantics, which compaction
preserves); ``hudi_rs_view`` gives the rows hudi-rs 0.5 returns for the same history,
which differ only for keys re-inserted after a delete with an ordering value lower than
a version the delete removed (hudi-rs takes the greatest ordering across all versions
before applying deletes).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Row = dict[str, Any]


@dataclass
class _Version:
    row: Row
    ordering: Any
    commit: int


@dataclass
class TableModel:
    key: Callable[[Row], Hashable]
    ordering_field: str | None
    live: dict[Hashable, _Version] = field(default_factory=dict)
    history: list[tuple[int, str, list[Row]]] = field(default_factory=list)

    def _ordering(self, row: Row) -> Any:
        return row[self.ordering_field] if self.ordering_field else 0

    def upsert(self, commit: int, batch: Iterable[Row]) -> None:
        batch = list(batch)
        self.history.append((commit, "upsert", batch))
        for row in _precombine(batch, self.key, self._ordering):
            current = self.live.get(self.key(row))
            if current is None or self._ordering(row) >= current.ordering:
                self.live[self.key(row)] = _Version(row, self._ordering(row), commit)

    def delete(self, commit: int, keys: Iterable[Hashable]) -> None:
        keys = list(keys)
        self.history.append((commit, "delete", [{"__key": k} for k in keys]))
        for k in keys:
            self.live.pop(k, None)

    def rows(self) -> list[Row]:
        return [v.row for v in self.live.values()]

    def changed_since(self, start: int, end: int) -> list[Row]:
        """Live rows whose current version was written by a commit in (start, end]."""
        return [v.row for v in self.live.values() if start < v.commit <= end]

    def hudi_rs_view(self, start: int = 0, end: int | None = None) -> list[Row]:
        """What hudi-rs returns: per key the greatest (ordering, commit) version, unless a
        later-committed delete exists. With ``start``/``end``: its incremental read, which
        merges only what commits in (start, end] wrote (memtier, like Java Hudi, returns
        the merged state of keys last written in that range: :meth:`changed_since`)."""
        best: dict[Hashable, _Version] = {}
        last_delete: dict[Hashable, int] = {}
        for commit, kind, batch in self.history:
            if commit <= start or (end is not None and commit > end):
                continue
            if kind == "delete":
                for item in batch:
                    last_delete[item["__key"]] = commit
                continue
            for row in _precombine(batch, self.key, self._ordering):
                k, o = self.key(row), self._ordering(row)
                current = best.get(k)
                if current is None or (o, commit) >= (current.ordering, current.commit):
                    best[k] = _Version(row, o, commit)
        return [v.row for k, v in best.items() if last_delete.get(k, -1) <= v.commit]


def _precombine(batch: list[Row], key: Callable[[Row], Hashable], ordering: Callable[[Row], Any]) -> list[Row]:
    """One row per key: the greatest ordering value, later rows winning ties."""
    chosen: dict[Hashable, Row] = {}
    for row in batch:
        k = key(row)
        if k not in chosen or ordering(row) >= ordering(chosen[k]):
            chosen[k] = row
    return list(chosen.values())


def project(rows: Iterable[Mapping[str, Any]], columns: list[str]) -> list[tuple]:
    tuples = [tuple(r[c] for c in columns) for r in rows]
    return sorted(tuples, key=lambda t: tuple(repr(v) for v in t))
