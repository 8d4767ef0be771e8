"""What a metastore needs to know of a memtier (Hudi) table, derived from its metadata the
way Apache Hudi's hive-sync derives it: the columns (the Hudi meta columns first), the
partition columns, the input format that tells query engines it is a Hudi table, and a
``name_ro`` / ``name_rt`` pair for a merge-on-read table."""

from __future__ import annotations

from dataclasses import dataclass

from memtier.catalog.hivetypes import escape_path_name, hive_type
from memtier.errors import InvalidArgumentError
from memtier.hudi.filters import parse_partition_path
from memtier.hudi.tablemeta import TableMeta

__all__ = ["HiveColumn", "HivePartition", "HiveTable", "check_name", "hive_tables", "hive_partition"]

PARQUET_SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
PARQUET_OUTPUT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
#: Hudi's input formats: base files only (read-optimized), and base files merged with logs.
READ_OPTIMIZED_INPUT = "org.apache.hudi.hadoop.HoodieParquetInputFormat"
REALTIME_INPUT = "org.apache.hudi.hadoop.realtime.HoodieParquetRealtimeInputFormat"


@dataclass(frozen=True)
class HiveColumn:
    name: str
    type: str


@dataclass(frozen=True)
class HivePartition:
    """One partition: its values (in partition-column order), its Hive name
    (``city=oslo``), and its Hudi partition path relative to the table."""

    values: tuple[str, ...]
    name: str
    path: str


@dataclass(frozen=True)
class HiveTable:
    """One metastore table over a Hudi table's files."""

    name: str
    location: str  # the Hudi table's base path, as the engine addresses it
    columns: tuple[HiveColumn, ...]
    partition_columns: tuple[HiveColumn, ...]
    input_format: str
    parameters: tuple[tuple[str, str], ...]
    serde_parameters: tuple[tuple[str, str], ...]  # besides ``path`` (the location)


def check_name(what: str, name: str) -> str:
    """``name`` if a metastore takes it as it is (lower case, no '/', no leading '.')."""
    if not name or name != name.lower() or "/" in name or name.startswith("."):
        raise InvalidArgumentError(f"{what} name {name!r} must be lower case, without '/' or a leading '.'")
    return name


def hive_tables(meta: TableMeta, name: str, location: str) -> list[HiveTable]:
    """The metastore tables of a Hudi table: ``name`` for copy-on-write; ``name_ro``
    (read-optimized: base files) and ``name_rt`` (snapshot: base and log files) for
    merge-on-read, as Hudi's hive-sync registers them."""
    partition_fields = meta.config.partition_fields
    columns = tuple(
        HiveColumn(f.name, hive_type(f.type, f.name)) for f in meta.file_schema if f.name not in partition_fields
    )
    partition_columns = tuple(
        HiveColumn(p, hive_type(meta.physical.field(p).type, p) if p in meta.physical.names else "string")
        for p in partition_fields
    )
    parameters = (
        ("EXTERNAL", "TRUE"),
        ("spark.sql.sources.provider", "hudi"),
        ("hoodie.table.type", meta.config.table_type),
        ("memtier.table", meta.config.name),
    )

    def table(table_name: str, input_format: str, read_optimized: bool) -> HiveTable:
        # Spark's Hudi source reads a table whose serde says so as read-optimized
        serde = (("hoodie.query.as.ro.table", str(read_optimized).lower()),)
        return HiveTable(table_name, location, columns, partition_columns, input_format, parameters, serde)

    if not meta.is_merge_on_read:
        return [table(name, READ_OPTIMIZED_INPUT, False)]
    return [table(f"{name}_ro", READ_OPTIMIZED_INPUT, True), table(f"{name}_rt", REALTIME_INPUT, False)]


def hive_partition(meta: TableMeta, path: str) -> HivePartition | None:
    """The partition at Hudi partition path ``path`` (None for a non-partitioned table,
    or a path that does not parse as the table's partition fields)."""
    fields = meta.config.partition_fields
    if not fields:
        return None
    values = parse_partition_path(path, fields, meta.config.hive_style_partitioning)
    if not values:
        return None
    texts = tuple("__HIVE_DEFAULT_PARTITION__" if values[f] is None else str(values[f]) for f in fields)
    name = "/".join(f"{f}={escape_path_name(v)}" for f, v in zip(fields, texts, strict=True))
    return HivePartition(texts, name, path)
