"""What catalog sync writes into: a metastore backend (:mod:`memtier.catalog.metastores`
opens the one a URI names)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol
from urllib.parse import urlsplit

from memtier.catalog.tables import HivePartition, HiveTable

__all__ = ["Metastore", "is_hive_metastore"]


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
