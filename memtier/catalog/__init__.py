"""Catalog sync: memtier tables registered in a metastore (Trino's file metastore or a Hive
Metastore over Thrift) so that Trino, Presto and Spark SQL find them by name."""

from memtier.catalog.filemetastore import FileMetastore
from memtier.catalog.metastore import Metastore
from memtier.catalog.metastores import open_metastore
from memtier.catalog.presto import PRESTO_CONNECTORS, presto_catalog_properties
from memtier.catalog.sync import CatalogSync, SyncResult, sync_table
from memtier.catalog.trino import trino_catalog_properties, trino_location

__all__ = ["PRESTO_CONNECTORS", "CatalogSync", "FileMetastore", "Metastore", "SyncResult", "open_metastore",
           "presto_catalog_properties", "sync_table", "trino_catalog_properties", "trino_location"]
