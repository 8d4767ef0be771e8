"""Trino's file-based Hive metastore (``hive.metastore=file``), written directly: one JSON
``.trinoSchema`` file per database, table and partition under the catalog directory.

Layout (as Trino's ``FileHiveMetastore`` reads it)::

    <dir>/.<database>.trinoSchema
    <dir>/<database>/<table>/.trinoSchema
    <dir>/<database>/<table>/<col>=<value>[/<col>=<value>...]/.trinoSchema

Every file is replaced atomically, so a query never reads half of one. Trino refuses files
another writer version wrote unless the catalog sets
``hive.metastore.version-compatibility=UNSAFE_ASSUME_COMPATIBILITY`` (see
:func:`memtier.catalog.trino.trino_catalog_properties`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from memtier.catalog.tables import (
    PARQUET_OUTPUT,
    PARQUET_SERDE,
    HiveColumn,
    HivePartition,
    HiveTable,
    check_name,
)
from memtier.catalog.trino import trino_location
from memtier.errors import NotFoundError
from memtier.io import FileIO, join, open_fileio

__all__ = ["FileMetastore"]

SCHEMA_FILE = ".trinoSchema"
WRITER = "memtier"


def _columns(columns: Sequence[HiveColumn]) -> list[dict[str, Any]]:
    return [{"name": c.name, "type": c.type, "properties": {}} for c in columns]


class FileMetastore:
    """A Trino file metastore at ``root`` (a local path or an object-store URI)."""

    def __init__(self, root: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.uri = root
        self._io: FileIO = open_fileio(root, storage_options)

    def location(self, path: str) -> str:
        return trino_location(path)

    def _write(self, path: str, document: Mapping[str, Any]) -> None:
        self._io.makedirs(path.rsplit("/", 1)[0])
        self._io.write_atomic(path, json.dumps(document, indent=2, sort_keys=True).encode())

    def _read(self, path: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._io.read_bytes(path))
        except (FileNotFoundError, NotFoundError):
            return None

    def ensure_database(self, database: str) -> None:
        """Create the database (Trino's schema) unless it exists."""
        check_name("database", database)
        marker = join(self.root, f".{database}{SCHEMA_FILE}")
        if not self._io.exists(marker):
            self._io.makedirs(join(self.root, database))
            self._write(marker, {"writerVersion": WRITER, "ownerName": "memtier", "ownerType": "USER",
                                 "parameters": {}})

    def _table_dir(self, database: str, table: str) -> str:
        return join(self.root, database, check_name("table", table))

    def put_table(self, database: str, table: HiveTable) -> bool:
        """Write (or rewrite) the table's definition; False when it was already current."""
        document = {
            "writerVersion": WRITER,
            "owner": "memtier",
            "tableType": "EXTERNAL_TABLE",
            "dataColumns": _columns(table.columns),
            "partitionColumns": _columns(table.partition_columns),
            "parameters": dict(table.parameters),
            "originalStorageFormat": {"serde": PARQUET_SERDE, "inputFormat": table.input_format,
                                      "outputFormat": PARQUET_OUTPUT},
            "serdeParameters": {**dict(table.serde_parameters), "path": table.location},
            "externalLocation": table.location,
            "columnStatistics": {},
        }
        path = join(self._table_dir(database, table.name), SCHEMA_FILE)
        existing = self._read(path)
        if existing == document:
            return False
        if existing is not None and existing.get("externalLocation") != table.location:
            self._forget_partitions(database, table.name)  # they point into the old location
        self._write(path, document)
        if existing is not None and existing.get("dataColumns") != document["dataColumns"]:
            self._cascade(database, table)
        return True

    def _forget_partitions(self, database: str, table: str) -> None:
        """Drop the registrations of the table's partitions (a table now at another
        location: a sync registers them again under it; Trino refuses a partition outside
        its table's location)."""
        for name in self.partition_names(database, table):
            self._io.delete(join(self._table_dir(database, table), name, SCHEMA_FILE))

    def _cascade(self, database: str, table: HiveTable) -> None:
        """The table's registered partitions take its (new) columns, as a Hive Metastore's
        ``CASCADE`` alters them."""
        for name in self.partition_names(database, table.name):
            path = join(self._table_dir(database, table.name), name, SCHEMA_FILE)
            document = self._read(path)
            if document is not None:
                self._write(path, {**document, "columns": _columns(table.columns)})

    def partition_names(self, database: str, table: str) -> set[str]:
        """The names (``a=1/b=x``) of the table's registered partitions."""
        directory = self._table_dir(database, table)
        if not self._io.exists(directory):
            return set()
        suffix = "/" + SCHEMA_FILE
        names = set()
        for info in self._io.list_files(directory):
            relative = info.path[len(directory):].lstrip("/")
            if relative.endswith(suffix):
                names.add(relative[: -len(suffix)])
        return names

    def put_partitions(self, database: str, table: HiveTable, partitions: Sequence[HivePartition]) -> None:
        """Register ``partitions`` of ``table`` (each located at the table's location plus its path)."""
        for partition in partitions:
            location = f"{table.location.rstrip('/')}/{partition.path}"
            document = {
                "writerVersion": WRITER,
                "columns": _columns(table.columns),
                "parameters": {},
                "storageFormat": "PARQUET",
                "serdeParameters": {"path": location},
                "externalLocation": location,
                "columnStatistics": {},
            }
            self._write(join(self._table_dir(database, table.name), partition.name, SCHEMA_FILE), document)

    def drop_table(self, database: str, table: str) -> None:
        """Forget the table and its partitions (the Hudi files are not touched)."""
        self._io.delete_dir(self._table_dir(database, table))
