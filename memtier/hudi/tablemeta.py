"""What every reader and writer of one table needs to know, resolved once when it opens.

A table's schema may grow (:mod:`memtier.hudi.evolution`). Each version is written into
the metadata of every commit made under it, as Hudi writes its writer schema
(``extraMetadata.schema``, the Avro schema every Hudi reader resolves the table's schema
from), and memtier adds its own logical Arrow schema and version number
(:data:`SCHEMA_KEY`, :data:`SCHEMA_VERSION_KEY`). The table's schema is the one the newest
commit carrying one names; before any, the one ``hoodie.properties`` holds (version 0).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property, partial

import pyarrow as pa
import pyarrow.types as pat

from memtier.errors import UnsupportedTableError
from memtier.hudi.avro import arrow_to_avro_schema, avro_to_arrow_schema, with_meta_fields
from memtier.hudi.evolution import Roles
from memtier.hudi.mdtfiles import names_files_partition, record_instant
from memtier.hudi.merge import MergeSpec
from memtier.hudi.properties import TableConfig, load_table_config
from memtier.hudi.schema import META_SCHEMA, decode_schema, encode_schema, physical_schema
from memtier.hudi.timeline import Timeline, TimelineWriter
from memtier.io import FileIO, join

__all__ = ["ARROW_SCHEMA_KEY", "RECORD_KEY", "SCHEMA_KEY", "SCHEMA_VERSION_KEY", "TableMeta"]

#: memtier's own hoodie.properties key holding the logical Arrow schema (base64 IPC) the
#: table was created with.
ARROW_SCHEMA_KEY = "hoodie.memtier.arrow.schema"
#: Commit metadata keys (``extraMetadata``) of the table's logical Arrow schema as of the
#: commit (base64 IPC) and its version (0 at creation, one more at each change).
SCHEMA_KEY = "memtier.schema"
SCHEMA_VERSION_KEY = "memtier.schemaVersion"
RECORD_KEY = "_hoodie_record_key"
COMMIT_TIME = "_hoodie_commit_time"
FILE_NAME = "_hoodie_file_name"


@dataclass(frozen=True)
class TableMeta:
    """A table's storage, config and schemas (logical, physical, Avro)."""

    io: FileIO
    base_path: str
    config: TableConfig
    schema: pa.Schema  # logical: what reads return
    physical: pa.Schema  # what data files carry (without meta columns)
    schema_version: int = 0  # one more at each change of the schema

    @classmethod
    def load(cls, io: FileIO, base_path: str) -> TableMeta:
        config = load_table_config(io, base_path)
        timeline = Timeline.load(io, base_path, config.timeline_layout_version)
        logical, version, avro = _latest_schema(io, base_path, config, timeline)
        if logical is not None:
            return cls(io, base_path, config, logical, physical_schema(logical, config.name), version)
        if avro is None:
            raise UnsupportedTableError(
                f"table at {base_path} has no schema: no commit carries extraMetadata.schema "
                "and hoodie.table.create.schema is missing"
            )
        schema = avro_to_arrow_schema(avro)
        return cls(io, base_path, config, schema, schema, version)

    def with_schema(self, schema: pa.Schema, version: int) -> TableMeta:
        """This table with schema ``schema`` as version ``version``."""
        return TableMeta(self.io, self.base_path, self.config, schema, physical_schema(schema, self.config.name),
                         version)

    def schema_metadata(self) -> dict[str, str]:
        """The commit metadata naming this schema: Hudi's Avro writer schema, and memtier's
        Arrow schema and version."""
        return {"schema": json.dumps(self.avro_schema), SCHEMA_KEY: encode_schema(self.schema),
                SCHEMA_VERSION_KEY: str(self.schema_version)}

    def timeline(self) -> Timeline:
        return Timeline.load(self.io, self.base_path, self.config.timeline_layout_version)

    def timeline_writer(self) -> TimelineWriter:
        """A writer of this table's timeline (its layout: 1 for version 6, else 2)."""
        record = None
        if names_files_partition(self.config):  # Hudi's metadata table first, as Hudi orders them
            record = partial(record_instant, self.io, self.base_path)
        return TimelineWriter(self.io, self.base_path, self.config.timeline_layout_version, record)

    @property
    def layout(self) -> int:
        """The timeline layout: instant files' names and commit metadata's encoding."""
        return self.config.timeline_layout_version

    @property
    def hoodie_dir(self) -> str:
        return join(self.base_path, ".hoodie")

    @cached_property
    def avro_schema(self) -> dict:
        """The table's Avro schema without meta fields (commit ``extraMetadata.schema``)."""
        return arrow_to_avro_schema(self.schema, self.config.name)

    @cached_property
    def avro_schema_with_meta(self) -> dict:
        return with_meta_fields(self.avro_schema)

    @cached_property
    def file_schema(self) -> pa.Schema:
        """Meta columns then the physical data columns: the schema of every data file."""
        return pa.schema([*META_SCHEMA, *self.physical])

    @cached_property
    def integer_key(self) -> str | None:
        """The single integer key column, when merges can compare it instead of strings."""
        fields = self.config.record_key_fields
        if len(fields) == 1 and fields[0] in self.physical.names:
            if pat.is_integer(self.physical.field(fields[0]).type):
                return fields[0]
        return None

    @property
    def roles(self) -> Roles:
        """Its key, partition and ordering columns (whose types evolve as they may)."""
        config = self.config
        return Roles(tuple(config.record_key_fields), tuple(config.partition_fields), config.ordering_field)

    @property
    def keyless(self) -> bool:
        """An append-only table: no record-key columns, Hudi-generated record keys."""
        return not self.config.record_key_fields

    @property
    def filtered_key_fields(self) -> tuple[str, ...]:
        """The key columns base files carry Bloom filters of (:mod:`memtier.hudi.keyfilter`):
        those of a partitioned table, where a key given alone may be in any partition's
        file group of its bucket; none otherwise (the bucket names the one file group)."""
        return tuple(self.config.record_key_fields) if self.config.partition_fields else ()

    @cached_property
    def merge_spec(self) -> MergeSpec:
        """How records merge: by the ordering field (the later write on ties), or in commit
        order when the table has none or Hudi 1.x's merge mode says so."""
        ordering = self.config.ordering_field
        if ordering is not None and ordering not in self.physical.names:
            ordering = None
        if self.config.merge_mode == "COMMIT_TIME_ORDERING":
            ordering = None
        if self.keyless:
            return MergeSpec(None, ordering)
        return MergeSpec(self.integer_key or RECORD_KEY, ordering)

    @property
    def is_merge_on_read(self) -> bool:
        return self.config.table_type == "MERGE_ON_READ"

    def require_bucket_index(self) -> int:
        """The bucket count; writes need one (rows are routed by bucket)."""
        if not self.config.buckets:
            raise UnsupportedTableError(
                f"table {self.config.name} at {self.base_path} has no bucket index "
                "(hoodie.bucket.index.num.buckets); memtier writes bucket-indexed tables only"
            )
        return self.config.buckets


def _latest_schema(
    io: FileIO, base_path: str, config: TableConfig, timeline: Timeline
) -> tuple[pa.Schema | None, int, dict | None]:
    """(memtier's logical schema or None, its version, the Avro schema) of the table: of
    the newest commit carrying a schema; before any, the create schema. A schema another
    writer (Apache Hudi) evolved the table to after memtier's last commit is taken from
    its Avro, as the version after memtier's last."""
    foreign: dict | None = None
    for instant in reversed(timeline.completed()):
        extra = timeline.read_commit_metadata(io, base_path, instant).extra_metadata
        if SCHEMA_KEY in extra:
            logical, version = decode_schema(extra[SCHEMA_KEY]), int(extra.get(SCHEMA_VERSION_KEY, 0))
            return _newest(config, logical, version, foreign)
        if foreign is None and extra.get("schema"):
            foreign = json.loads(extra["schema"])
    if ARROW_SCHEMA_KEY in config.raw:
        return _newest(config, decode_schema(config.raw[ARROW_SCHEMA_KEY]), 0, foreign)
    if foreign is None and config.create_schema:
        foreign = json.loads(config.create_schema)
    return None, 0, foreign


def _avro_fields(schema: pa.Schema) -> list[dict]:
    """The Avro fields of ``schema`` as memtier writes them (every field nullable, names
    normalized): two schemas with equal fields name the same columns and types."""
    return arrow_to_avro_schema(schema, "t")["fields"]


def _newest(
    config: TableConfig, logical: pa.Schema, version: int, foreign: dict | None
) -> tuple[pa.Schema | None, int, dict | None]:
    """memtier's ``logical`` schema (``version``), unless a later commit of another writer
    carries ``foreign``, an Avro schema other than its own."""
    if foreign is None or _avro_fields(avro_to_arrow_schema(foreign)) == _avro_fields(logical):
        return logical, version, None
    return None, version + 1, foreign
