"""The metastore a URI names: a directory (or an object-store URI) is a Trino file
metastore; ``thrift://host:port`` is a Hive Metastore."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from memtier.catalog.filemetastore import FileMetastore
from memtier.catalog.metastore import Metastore, is_hive_metastore

__all__ = ["open_metastore"]


def open_metastore(uri: str, storage_options: Mapping[str, str] | None = None) -> Metastore:
    """The metastore at ``uri``: ``thrift://host:port`` a Hive Metastore, anything else a
    Trino file metastore directory (``storage_options`` serve one on an object store)."""
    if is_hive_metastore(uri):
        from memtier.catalog.hivemetastore import HiveMetastore  # pymetastore, the [hive] extra

        return HiveMetastore(uri)
    options = dict(storage_options or {}) if urlsplit(uri).scheme not in ("", "file") else None
    return FileMetastore(uri, options)
