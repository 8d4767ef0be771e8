"""What catalog sync writes into: a metastore backend, chosen by its URI. A directory (or an
object-store URI) is a Trino file metastore; ``thrift://host:port`` is a Hive Metastore."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol
from urllib.parse import urlsplit

from memtier.catalog.tables import HivePartition, HiveTable

__all__ = ["Metastore", "is_hive_metastore", "open_metastore"]


class Metastore(Protocol):
    """One metastore that tables and partitions are registered in."""

    uri: str

    def location(self, path: str) -> str:
        """The Hudi table at ``path`` as the engines reading this metastore address it."""
        ...

    def ensure_database(self, database: str) -> None: ...

    def put_table(self, database: str, table: HiveTable) -> bool:
        """Create or update the table's definition; False when it was already current."""
        ...

    def partition_names(self, database: str, table: str) -> set[str]:
        """The names (``a=1/b=x``) of the table's registered partitions."""
        ...

    def put_partitions(self, database: str, table: HiveTable, partitions: Sequence[HivePartition]) -> None:
        """Register ``partitions`` of ``table`` (each located at the table's location plus its path)."""
        ...

    def drop_table(self, database: str, table: str) -> None:
        """Forget the table and its partitions (the Hudi files are not touched)."""
        ...


def is_hive_metastore(uri: str) -> bool:
    return urlsplit(uri).scheme == "thrift"


def open_metastore(uri: str, storage_options: Mapping[str, str] | None = None) -> Metastore:
    """The metastore at ``uri``: ``thrift://host:port`` a Hive Metastore, anything else a
    Trino file metastore directory (``storage_options`` serve one on an object store)."""
    if is_hive_metastore(uri):
        from memtier.catalog.hivemetastore import HiveMetastore

        return HiveMetastore(uri)
    from memtier.catalog.filemetastore import FileMetastore

    options = dict(storage_options or {}) if urlsplit(uri).scheme not in ("", "file") else None
    return FileMetastore(uri, options)
