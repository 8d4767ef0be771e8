"""``HudiTable``: create, open, write and read an Apache Hudi table (versions 6, 8 and 9)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from memtier.errors import AlreadyExistsError, InvalidArgumentError, TableExistsError, UnsupportedTableError
from memtier.hudi.adopt import drop_empty_history
from memtier.hudi.avro import arrow_to_avro_schema
from memtier.hudi.filenames import bucket_or_none
from memtier.hudi.filters import Filter
from memtier.hudi.fsview import FileSlice, FileSystemView
from memtier.hudi.mdt import trim_metadata_table
from memtier.hudi.properties import (
    DEFAULT_TABLE_VERSION,
    TableConfig,
    properties_path,
    rewrite_table_config,
    write_table_config,
)
from memtier.hudi.reader import read_table
from memtier.hudi.schema import encode_schema, validate_table_schema
from memtier.hudi.tablemeta import ARROW_SCHEMA_KEY, TableMeta
from memtier.hudi.timeline import Timeline
from memtier.hudi.writer import rollback_pending, write_batch
from memtier.io import FileIO, basename, open_fileio

__all__ = ["HudiTable"]


TABLE_TYPES = ("MERGE_ON_READ", "COPY_ON_WRITE")


def _names(value: str | Sequence[str] | None, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not all(isinstance(v, str) for v in value):
        raise InvalidArgumentError(f"{what} must be column names, got {value!r}")
    return list(value)


def _default_name(path: str) -> str:
    """A Hudi table name from the last path segment (letters, digits, underscores)."""
    name = "".join(c if c.isalnum() else "_" for c in basename(path)) or "table"
    return f"t_{name}" if name[0].isdigit() else name


class HudiTable:
    """One Hudi table at a base path. Methods re-read the timeline, so a handle stays fresh."""

    def __init__(self, meta: TableMeta) -> None:
        self._meta = meta

    # -- lifecycle --------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str,
        schema: pa.Schema,
        record_key: str | Sequence[str] | None,
        ordering_field: str | None = None,
        partition_fields: str | Sequence[str] | None = None,
        buckets: int = 4,
        table_type: str = "MERGE_ON_READ",
        storage_options: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        log_block_format: str = "avro",
        table_version: int = DEFAULT_TABLE_VERSION,
    ) -> HudiTable:
        """Create an empty table; :class:`TableExistsError` if one is already at ``path``.

        ``buckets`` fixes the bucket index (a Hudi Spark writer must use the same count);
        ``record_key=None`` makes an append-only table: no merge by key, record keys
        generated as Hudi 0.14+ generates them, ``buckets`` file groups per partition
        filled by load. ``log_block_format`` is ``"avro"`` (readable by every Hudi reader, Trino's
        log-merging connector included) or ``"parquet"``. ``table_version`` is 6 (timeline
        layout 1), 8 or 9 (layout 2: completion times, log files named by their deltacommit,
        Avro commit metadata).
        """
        if table_type not in TABLE_TYPES:
            raise InvalidArgumentError(f"table_type must be one of {TABLE_TYPES}, got {table_type!r}")
        keys = _names(record_key, "record_key")
        partitions = _names(partition_fields, "partition_fields")
        validate_table_schema(schema, None if record_key is None else keys, ordering_field, partitions)
        io = open_fileio(path, storage_options)
        table_name = name or _default_name(path)
        config = TableConfig.new(
            table_name, table_type, keys, ordering_field, partitions, buckets,
            json.dumps(arrow_to_avro_schema(schema, table_name)), log_block_format, version=table_version,
        )
        config = dataclasses.replace(
            config, raw={**config.raw, ARROW_SCHEMA_KEY: encode_schema(schema)}
        )
        if io.exists(properties_path(path)):
            raise TableExistsError(f"a Hudi table already exists at {path}")
        try:
            write_table_config(io, path, config)
        except AlreadyExistsError as e:
            raise TableExistsError(f"a Hudi table already exists at {path}") from e
        return cls(TableMeta.load(io, path))

    @classmethod
    def open(cls, path: str, storage_options: Mapping[str, str] | None = None) -> HudiTable:
        """Open an existing table (memtier's or Apache Hudi's, version 6, 8 or 9)."""
        io = open_fileio(path, storage_options)
        return cls(TableMeta.load(io, path))

    # -- facts ------------------------------------------------------------------------
    @property
    def path(self) -> str:
        return self._meta.base_path

    @property
    def io(self) -> FileIO:
        return self._meta.io

    @property
    def meta(self) -> TableMeta:
        return self._meta

    @property
    def config(self) -> TableConfig:
        return self._meta.config

    @property
    def schema(self) -> pa.Schema:
        return self._meta.schema

    def timeline(self) -> Timeline:
        return self._meta.timeline()

    def file_slices(self, as_of: str | None = None) -> list[FileSlice]:
        """The latest file slice of every file group, as of ``as_of`` (default: now)."""
        view = FileSystemView.build(self.io, self.path, self.timeline(), as_of=as_of)
        return view.latest_slices()

    # -- data -------------------------------------------------------------------------
    def write(self, data: Any, operation: str = "upsert") -> str | None:
        """Write a batch (pyarrow Table/RecordBatch or pandas DataFrame) as one instant.

        ``operation``: ``"upsert"`` (default), ``"insert"`` (same routing; recorded as an
        insert) or ``"delete"`` (reads only the key and partition columns: the deletes
        apply in commit order, whatever ordering values the rows carry, as Hudi's Spark
        writer's ``delete`` operation does; the write tier's ``Client.delete`` takes
        ordered deletes). Upserted rows sharing a key keep the greatest ordering value.
        Returns the instant, or None if nothing was written. A rejected batch leaves the
        timeline untouched. Hudi's metadata table, if the table has one, keeps only its
        ``files`` partition, which records the write, or is dropped (:mod:`memtier.hudi.mdt`).
        """
        self._meta = trim_metadata_table(self._meta)
        return write_batch(self._meta, data, operation)

    def read(
        self,
        mode: str = "snapshot",
        as_of: str | datetime | None = None,
        start: str | datetime | None = None,
        end: str | datetime | None = None,
        columns: Sequence[str] | None = None,
        filters: Sequence[Filter] | None = None,
        *,
        include_meta: bool = False,
    ) -> pa.Table:
        """Read the table.

        Modes: ``"snapshot"`` (base files merged with logs, newest ordering value wins,
        deletes applied; ``as_of`` for time travel), ``"read_optimized"`` (base files only)
        and ``"incremental"`` (rows whose latest version was committed in ``(start, end]``).
        ``columns`` projects (Hudi meta columns may be named; ``include_meta`` adds all
        five); ``filters`` are ``(column, op, value)`` tuples, AND-ed.
        """
        return read_table(
            self._meta, mode=mode, as_of=as_of, start=start, end=end, columns=columns,
            filters=filters, include_meta=include_meta,
        )

    def set_bucket_index(self, buckets: int, *, convert: bool = False) -> None:
        """Record in ``hoodie.properties`` the bucket index an Apache Hudi writer used on
        this table, so memtier routes rows to the same file groups and can write it.

        Hudi keeps ``hoodie.bucket.index.num.buckets`` in its writers' configs, not in the
        table, so a table Hudi created says nothing of it. Hudi's metadata table, if the
        table has one, keeps only its ``files`` partition, which memtier keeps current, or is
        dropped as Hudi drops it when disabled (:mod:`memtier.hudi.mdt`). Refused when a file group is not a bucket's
        (its file id does not start with a bucket number below ``buckets``), unless
        ``convert`` (a clustering will rewrite them: :mod:`memtier.hudi.adopt`), or the table
        already records another count; a no-op when it records this one.
        """
        if not isinstance(buckets, int) or isinstance(buckets, bool) or buckets < 1:
            raise InvalidArgumentError(f"buckets must be a positive int, got {buckets!r}")
        if self.config.buckets == buckets:
            return
        if self.config.buckets is not None:
            raise UnsupportedTableError(
                f"table {self.config.name} records a bucket index of {self.config.buckets} buckets, not {buckets}"
            )
        groups = () if convert else FileSystemView.build(self.io, self.path, self.timeline()).file_groups
        for partition, file_id in groups:
            bucket = bucket_or_none(file_id)
            if bucket is None or bucket >= buckets:
                raise UnsupportedTableError(
                    f"file group {file_id} in partition {partition!r} of {self.path} is not one of "
                    f"{buckets} buckets: the table was not written with a bucket index of {buckets}"
                )
        meta = trim_metadata_table(self._meta)
        drop_empty_history(meta)  # Trino 476 fails on an empty one (memtier.hudi.adopt)
        rewrite_table_config(self.io, self.path, dataclasses.replace(meta.config, buckets=buckets))
        self._meta = TableMeta.load(self.io, self.path)

    def rollback_pending(self) -> list[str]:
        """Roll back instants left pending by a writer that died; returns their timestamps."""
        before = {i.timestamp for i in self.timeline().pending()}
        after = {i.timestamp for i in rollback_pending(self._meta).pending()}
        return sorted(before - after)

    def __repr__(self) -> str:
        return f"HudiTable({self.path!r}, {self.config.table_type})"
