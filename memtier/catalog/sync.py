"""Catalog sync: register a memtier table and its partitions in a metastore so that query
engines find it by name, as Apache Hudi's hive-sync does; and keep that current as commits
write into new partitions."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from memtier.catalog.metastore import Metastore
from memtier.catalog.metastores import open_metastore
from memtier.catalog.tables import check_name, hive_partition, hive_tables
from memtier.config import CatalogConfig
from memtier.errors import InvalidArgumentError
from memtier.hudi.commit import CommitMetadata
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.tablemeta import TableMeta

__all__ = ["CatalogSync", "SyncResult", "sync_table"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SyncResult:
    """What one sync did: the metastore tables of the memtier table, those whose
    definition it (re)wrote, and the partitions it added to each."""

    metastore: str
    database: str
    tables: list[str]
    written: list[str]
    partitions: list[str]  # the Hudi partition paths synced
    partitions_added: int

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def sync_table(
    meta: TableMeta, metastore: Metastore, *, database: str = "default", name: str | None = None,
    partitions: Iterable[str] | None = None,
) -> SyncResult:
    """Register the Hudi table ``meta`` (as ``name``, by default its Hudi table name) in
    ``metastore``: its table definitions and every partition holding a file group (or
    just ``partitions``, Hudi partition paths, when given). Safe to repeat: only what
    is missing or changed is written. Everything is derived (and refused, if it cannot
    be registered) before the first write."""
    name = check_name("table", (name or meta.config.name).lower())
    check_name("database", database)
    if partitions is None:
        partitions = FileSystemView.build(meta.io, meta.base_path, meta.timeline()).partitions()
    paths = sorted(set(partitions))
    found = [p for p in (hive_partition(meta, path) for path in paths) if p is not None]
    tables = hive_tables(meta, name, metastore.location(meta.base_path))
    metastore.ensure_database(database)
    written, added = [], 0
    for table in tables:
        if metastore.put_table(database, table):
            written.append(table.name)
        known = metastore.partition_names(database, table.name)
        missing = [p for p in found if p.name not in known]
        metastore.put_partitions(database, table, missing)
        added += len(missing)
    return SyncResult(metastore.uri, database, [t.name for t in tables], written, paths, added)


class CatalogSync:
    """Keeps one metastore current for a master's tables: a table is synced when it is
    added (and when the master starts), and again after any completed commit that wrote
    into a partition not synced yet. A failed sync never fails the commit: it is logged,
    and the table is synced whole by its first commit after ``retry_after_s`` (so a
    metastore that is down delays commits by one failed attempt per pause, not each)."""

    retry_after_s = 30.0

    def __init__(self, metastore: Metastore | None, database: str = "default",
                 storage_options: Mapping[str, str] | None = None) -> None:
        self.metastore = metastore
        self.database = database
        self._storage_options = dict(storage_options or {})
        self._synced: dict[str, set[str]] = {}  # table -> partition paths registered
        self._stale: set[str] = set()  # tables whose last sync failed or was put off
        self._retry_at = 0.0  # time.monotonic() before which syncs are put off (after a failure)
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: CatalogConfig, storage_options: Mapping[str, str] | None = None) -> CatalogSync:
        """The sync ``catalog.*`` settings ask for (none without ``catalog.file-metastore`` or
        ``catalog.hive-metastore``); ``storage_options`` serve a file metastore on an object store."""
        metastore = None if config.metastore is None else open_metastore(config.metastore, storage_options)
        return cls(metastore, config.database, storage_options)

    def sync(self, name: str, meta: TableMeta, metastore: str | None = None,
             database: str | None = None) -> SyncResult:
        """Sync ``name`` now: into ``metastore`` (a file-metastore directory or a Hive Metastore's
        ``thrift://`` URI) if given, else the configured one."""
        if metastore is None and self.metastore is None:
            raise InvalidArgumentError("no metastore to sync into: pass one, or start the cluster with "
                                       "catalog.file-metastore or catalog.hive-metastore")
        target = self.metastore if metastore is None else open_metastore(metastore, self._storage_options)
        assert target is not None
        result = sync_table(meta, target, database=database or self.database, name=name)
        if target is self.metastore and (database or self.database) == self.database:
            with self._lock:
                self._synced.setdefault(name, set()).update(result.partitions)
        return result

    def table_added(self, name: str, meta: TableMeta) -> None:
        if self.metastore is not None:
            self._sync_logged(name, meta, None)

    def committed(self, name: str, meta: TableMeta, content: bytes) -> None:
        """A commit of ``name`` completed with ``content`` (its commit metadata, JSON or Avro)."""
        if self.metastore is None:
            return
        try:
            partitions = {p for p, _ in CommitMetadata.decode(content).files()}
        except Exception:  # not a commit that writes files: nothing new to register
            return
        with self._lock:
            synced = self._synced.get(name)
            whole = synced is None or name in self._stale
            if not whole and not partitions - synced:
                return
            if time.monotonic() < self._retry_at:
                self._stale.add(name)  # the metastore failed a moment ago: the next sync does it all
                return
        self._sync_logged(name, meta, None if whole else partitions - synced)

    def table_dropped(self, name: str) -> None:
        """Forget the table's registrations (its files are gone); a metastore that fails
        to forget them is logged, not raised: the table is gone all the same."""
        with self._lock:
            self._synced.pop(name, None)
            self._stale.discard(name)
        if self.metastore is not None:
            try:
                for suffix in ("", "_ro", "_rt"):
                    self.metastore.drop_table(self.database, f"{name.lower()}{suffix}")
            except Exception:
                log.exception("dropping %s from the metastore %s failed", name, self.metastore.uri)

    def _sync_logged(self, name: str, meta: TableMeta, partitions: set[str] | None) -> None:
        assert self.metastore is not None
        with self._lock:
            try:
                result = sync_table(meta, self.metastore, database=self.database, name=name,
                                    partitions=partitions)
            except Exception:
                log.exception("catalog sync of %s into %s failed (retried by its first commit after %.0f s)",
                              name, self.metastore.uri, self.retry_after_s)
                self._stale.add(name)
                self._retry_at = time.monotonic() + self.retry_after_s
                return
            self._stale.discard(name)
            self._synced.setdefault(name, set()).update(result.partitions)

