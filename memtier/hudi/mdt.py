"""Hudi's metadata table (``.hoodie/metadata``) of a table memtier writes: what is kept.

On a table of version 8 or 9 whose metadata table has its ``files`` partition complete,
memtier keeps that partition current (:mod:`memtier.hudi.mdtfiles`) and drops every other
partition (column stats, partition stats, bloom filters, the record index, secondary and
expression indexes): memtier does not write them, and a stale index would make Hudi's
readers skip data. A partition is dropped as Hudi drops one whose index a writer disables
(``HoodieTableMetadataUtil.deleteMetadataTablePartition``): its name is removed from
``hoodie.table.metadata.partitions`` (and ``...partitions.inflight``) first, then its
folder deleted. Hudi's next writer with an index on builds that partition anew from the
``files`` partition.

Any other table with a metadata table (version 6, ``files`` still being built, an
unexpected file group layout) loses all of it, exactly as Apache Hudi drops it when a
writer runs with ``hoodie.metadata.enable=false`` (``deleteMetadataTable``): the folder is
deleted, then both properties are emptied. Readers then list the file system (their
fallback), and the next Hudi writer with the metadata table on builds it anew from a
listing, memtier's files included. A crash between folder and properties leaves properties
naming partitions whose folders are gone, which Hudi's writer repairs by building the
table again and which memtier finishes by dropping again.
"""

from __future__ import annotations

import dataclasses
import logging

from memtier.hudi.mdtfiles import FILES, keeps_files_partition, metadata_table_path
from memtier.hudi.properties import (
    METADATA_PARTITIONS,
    METADATA_PARTITIONS_INFLIGHT,
    TableConfig,
    load_table_config,
    rewrite_table_config,
)
from memtier.hudi.tablemeta import TableMeta
from memtier.io import join

__all__ = [
    "drop_metadata_table", "has_metadata_table", "metadata_table_changed", "metadata_table_path", "trim_metadata_table",
]

log = logging.getLogger(__name__)


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
    log.info("dropped Hudi's metadata table of %s (partitions %s): memtier cannot keep it current",
             meta.base_path, ",".join(partitions) or "none")
    return TableMeta.load(meta.io, meta.base_path)


def trim_metadata_table(meta: TableMeta) -> TableMeta:
    """Keep the metadata table's ``files`` partition if memtier can, dropping its other
    partitions; else drop all of it. The table's meta afterwards."""
    if not has_metadata_table(meta):
        return meta
    if not keeps_files_partition(meta.io, meta.base_path, meta.config):
        return drop_metadata_table(meta)
    others = [p for p in _partitions(meta.config) if p != FILES]
    if not others:
        return meta
    raw = {**meta.config.raw, METADATA_PARTITIONS: FILES, METADATA_PARTITIONS_INFLIGHT: ""}
    rewrite_table_config(meta.io, meta.base_path, dataclasses.replace(meta.config, raw=raw))
    for partition in others:
        meta.io.delete_dir(join(metadata_table_path(meta.base_path), partition))
    log.info("dropped partitions %s of Hudi's metadata table of %s: memtier keeps only files current",
             ",".join(others), meta.base_path)
    return TableMeta.load(meta.io, meta.base_path)


def metadata_table_changed(meta: TableMeta) -> bool:
    """Whether a Hudi writer changed the metadata table since ``meta`` was loaded: made one,
    or named partitions in the properties that ``meta`` does not."""
    if not meta.io.exists(join(metadata_table_path(meta.base_path), ".hoodie", "hoodie.properties")):
        return False
    return _partitions(load_table_config(meta.io, meta.base_path)) != _partitions(meta.config)
