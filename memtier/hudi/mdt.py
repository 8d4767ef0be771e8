"""Hudi's metadata table (``.hoodie/metadata``) of a table memtier writes.

memtier does not write the metadata table: its commits would be missing from it, and
Hudi's readers list a table's files through it (their default), so they would not see
them. A table that has one loses it when memtier takes it over, exactly as Apache Hudi
drops it when a writer runs with ``hoodie.metadata.enable=false``
(``HoodieTableMetadataUtil.deleteMetadataTable``): the folder is deleted, then
``hoodie.table.metadata.partitions`` and ``...partitions.inflight`` are emptied in
``hoodie.properties``. Readers then list the file system (their fallback), and the next
Hudi writer with the metadata table on builds it anew from a listing, memtier's files
included. The order (folder first, properties after) is Hudi's: a crash between leaves
properties naming partitions whose folders are gone, which Hudi's writer repairs by
building the table again and which memtier finishes by dropping again.
"""

from __future__ import annotations

import dataclasses
import logging

from memtier.hudi.properties import (
    METADATA_PARTITIONS,
    METADATA_PARTITIONS_INFLIGHT,
    TableConfig,
    rewrite_table_config,
)
from memtier.hudi.tablemeta import TableMeta
from memtier.io import join

__all__ = ["drop_metadata_table", "has_metadata_table", "metadata_table_path"]

log = logging.getLogger(__name__)


def metadata_table_path(base_path: str) -> str:
    return join(base_path, ".hoodie", "metadata")


def has_metadata_table(meta: TableMeta) -> bool:
    """Whether the table has Hudi's metadata table: partitions named in its properties
    (complete or being built), or the folder."""
    return bool(_partitions(meta.config)) or meta.io.exists(
        join(metadata_table_path(meta.base_path), ".hoodie", "hoodie.properties"))


def _partitions(config: TableConfig) -> list[str]:
    names = f"{config.raw.get(METADATA_PARTITIONS, '')},{config.raw.get(METADATA_PARTITIONS_INFLIGHT, '')}"
    return [p.strip() for p in names.split(",") if p.strip()]


def drop_metadata_table(meta: TableMeta) -> TableMeta:
    """Delete the metadata table as Hudi does when it is disabled; the table's meta
    afterwards (``meta`` itself when it has none)."""
    if not has_metadata_table(meta):
        return meta
    partitions = _partitions(meta.config)
    meta.io.delete_dir(metadata_table_path(meta.base_path))
    raw = {**meta.config.raw, METADATA_PARTITIONS: "", METADATA_PARTITIONS_INFLIGHT: ""}
    rewrite_table_config(meta.io, meta.base_path, dataclasses.replace(meta.config, raw=raw))
    log.info("dropped Hudi's metadata table of %s (partitions %s): memtier's commits are not written to it",
             meta.base_path, ",".join(partitions) or "none")
    return TableMeta.load(meta.io, meta.base_path)
