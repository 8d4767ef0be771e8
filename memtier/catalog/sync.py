"""Catalog sync: register a memtier table and its partitions in a metastore so that query
engines find it by name, as Apache Hudi's hive-sync does; and keep that current as commits
write into new partitions."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from memtier.catalog.filemetastore import FileMetastore
from memtier.catalog.tables import hive_partition, hive_tables
from memtier.catalog.trino import trino_location
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
    meta: TableMeta, metastore: FileMetastore, *, database: str = "default", name: str | None = None,
    partitions: Iterable[str] | None = None,
) -> SyncResult:
    """Register the Hudi table ``meta`` (as ``name``, by default its Hudi table name) in
    ``metastore``: its table definitions and every partition holding a file group (or
    just ``partitions``, Hudi partition paths, when given). Safe to repeat: only what
    is missing or changed is written."""
    name = (name or meta.config.name).lower()
    metastore.ensure_database(database)
    if partitions is None:
        partitions = FileSystemView.build(meta.io, meta.base_path, meta.timeline()).partitions()
    paths = sorted(set(partitions))
    found = [p for p in (hive_partition(meta, path) for path in paths) if p is not None]
    tables, written, added = [], [], 0
    for table in hive_tables(meta, name, trino_location(meta.base_path)):
        tables.append(table.name)
        if metastore.put_table(database, table):
            written.append(table.name)
        known = metastore.partition_names(database, table.name)
        for partition in found:
            if partition.name not in known:
                metastore.put_partition(database, table, partition)
                added += 1
    return SyncResult(metastore.root, database, tables, written, paths, added)


class CatalogSync:
    """Keeps one metastore current for a master's tables: a table is synced when it is
    added (and when the master starts), and again after any completed commit that wrote
    into a partition not synced yet. A failed sync never fails the commit: it is logged
    and retried by the next commit of the table."""

    def __init__(self, metastore: FileMetastore | None, database: str = "default",
                 storage_options: Mapping[str, str] | None = None) -> None:
        self.metastore = metastore
        self.database = database
        self._storage_options = dict(storage_options or {})
        self._synced: dict[str, set[str]] = {}  # table -> partition paths registered
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: CatalogConfig, storage_options: Mapping[str, str] | None = None) -> CatalogSync:
        """The sync ``catalog.*`` settings ask for (none without ``catalog.file-metastore``);
        ``storage_options`` serve a metastore on an object store."""
        metastore = None
        if config.file_metastore is not None:
            metastore = FileMetastore(config.file_metastore, _options_for(config.file_metastore, storage_options))
        return cls(metastore, config.database, storage_options)

    def sync(self, name: str, meta: TableMeta, metastore: str | None = None,
             database: str | None = None) -> SyncResult:
        """Sync ``name`` now: into ``metastore`` (a directory) if given, else the configured one."""
        if metastore is None and self.metastore is None:
            raise InvalidArgumentError(
                "no metastore to sync into: pass one, or start the cluster with catalog.file-metastore"
            )
        target = self.metastore if metastore is None else FileMetastore(
            metastore, _options_for(metastore, self._storage_options))
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
        """A commit of ``name`` completed with ``content`` (its commit metadata, JSON)."""
        if self.metastore is None:
            return
        try:
            partitions = {p for p, _ in CommitMetadata.from_json(content).files()}
        except Exception:  # not a commit that writes files: nothing new to register
            return
        with self._lock:
            synced = self._synced.get(name)
        if synced is None or partitions - synced:
            self._sync_logged(name, meta, None if synced is None else partitions - synced)

    def table_dropped(self, name: str) -> None:
        """Forget the table's registrations (its files are gone)."""
        with self._lock:
            self._synced.pop(name, None)
        if self.metastore is not None:
            for suffix in ("", "_ro", "_rt"):
                self.metastore.drop_table(self.database, f"{name.lower()}{suffix}")

    def _sync_logged(self, name: str, meta: TableMeta, partitions: set[str] | None) -> None:
        assert self.metastore is not None
        with self._lock:
            try:
                result = sync_table(meta, self.metastore, database=self.database, name=name,
                                    partitions=partitions)
            except Exception:
                log.exception("catalog sync of %s into %s failed (retried on its next commit)",
                              name, self.metastore.root)
                return
            self._synced.setdefault(name, set()).update(result.partitions)


def _options_for(uri: str, storage_options: Mapping[str, str] | None) -> dict[str, str] | None:
    """Storage options apply to object-store URIs only, never to local paths."""
    return dict(storage_options or {}) if urlsplit(uri).scheme not in ("", "file") else None
