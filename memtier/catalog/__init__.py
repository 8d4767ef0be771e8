"""Catalog sync: memtier tables registered in a metastore (Trino's file metastore) so that
Trino, Presto and Spark SQL find them by name."""

from memtier.catalog.filemetastore import FileMetastore
from memtier.catalog.sync import CatalogSync, SyncResult, sync_table
from memtier.catalog.trino import trino_catalog_properties, trino_location

__all__ = ["CatalogSync", "FileMetastore", "SyncResult", "sync_table", "trino_catalog_properties",
           "trino_location"]
