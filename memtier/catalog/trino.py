"""How Trino addresses what memtier writes: the catalog file of a Hudi catalog over a
metastore that memtier syncs, and table locations in Trino's file-system schemes."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from memtier.catalog.metastore import is_hive_metastore

__all__ = ["trino_catalog_properties", "trino_location"]


def trino_location(path: str) -> str:
    """``path`` as Trino's native file systems name it: a local path becomes
    ``local:///...`` (the catalog enables ``fs.native-local.enabled`` with
    ``local.location=/``); ``s3://`` and other URIs stay as they are."""
    scheme = urlsplit(path).scheme
    if scheme == "file":
        path = urlsplit(path).path
    elif scheme:
        return "s3://" + path.split("://", 1)[1] if scheme == "s3a" else path
    return "local://" + os.path.abspath(path)


def trino_catalog_properties(metastore: str) -> str:
    """The ``etc/catalog/<name>.properties`` of a Trino Hudi catalog over the metastore
    ``metastore`` that ``memtier sync-catalog`` (or ``catalog.file-metastore`` /
    ``catalog.hive-metastore``) keeps current: a file-metastore directory or a Hive
    Metastore's ``thrift://`` URI. Tables on object stores also need the store's
    ``fs.native-s3.enabled`` and ``s3.*`` settings."""
    if is_hive_metastore(metastore):
        return "\n".join([
            "connector.name=hudi",
            f"hive.metastore.uri={metastore}",
            "# the metastore holds Hadoop locations (file:/...) as Hudi's hive-sync registers them",
            "fs.hadoop.enabled=true",
            "",
        ])
    return "\n".join([
        "connector.name=hudi",
        "hive.metastore=file",
        f"hive.metastore.catalog.dir={trino_location(metastore)}",
        "# memtier, not this Trino version, writes the metastore files",
        "hive.metastore.version-compatibility=UNSAFE_ASSUME_COMPATIBILITY",
        "fs.native-local.enabled=true",
        "local.location=/",
        "",
    ])
