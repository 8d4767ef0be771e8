"""What instant files hold: commit metadata (v6 JSON, v8/v9 Avro) and rollback plan/metadata.

* ``HoodieCommitMetadata`` (commit, deltacommit, replacecommit): table version 6 writes
  Jackson-pretty-printed JSON with exactly the field names and order Spark writes; versions
  8 and 9 (timeline layout 2) write an Avro object container file. Both decode to
  :class:`CommitMetadata` (:meth:`CommitMetadata.decode` tells them apart by content).
* ``HoodieRollbackPlan`` (``<t>.rollback.requested``) and ``HoodieRollbackMetadata``
  (``<t>.rollback``) are Avro container files on every table version; their schemas below
  follow the field lists of apache/hudi ``hudi-common/src/main/avro/*.avsc``.

Encoding only: reading and writing the files is :mod:`memtier.hudi.timeline`'s job.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import fastavro

from memtier.errors import InvalidArgumentError, UnsupportedTableError
from memtier.io import basename

__all__ = [
    "AVRO_NAMESPACE",
    "NULL_COMMIT",
    "CommitMetadata",
    "RollbackMetadata",
    "RollbackPlan",
    "WriteStat",
    "is_avro_container",
    "read_single_record",
    "write_single_record",
]

#: ``prevCommit`` of a write stat that created its file group.
NULL_COMMIT = "null"
#: Operation type of metadata that names none (an empty instant file).
UNKNOWN_OPERATION = "UNKNOWN"

_AVRO_MAGIC = b"Obj\x01"
AVRO_NAMESPACE = "org.apache.hudi.avro.model"
_COMMIT_RECORDS = ("HoodieCommitMetadata", "HoodieReplaceCommitMetadata")
_RUNTIME_STATS = {"totalScanTime": 0, "totalUpsertTime": 0, "totalCreateTime": 0}


def is_avro_container(data: bytes) -> bool:
    """True when ``data`` starts like an Avro object container file."""
    return data[:4] == _AVRO_MAGIC


# ======================================================================================
# Jackson-style JSON (what Hudi's JsonUtils pretty printer produces)
# ======================================================================================


def _jackson(value: Any, depth: int = 0) -> str:
    """JSON as Jackson's default pretty printer lays it out: ``"k" : v``, ``[ a, b ]``, ``{ }``."""
    if isinstance(value, Mapping):
        if not value:
            return "{ }"
        pad = "  " * (depth + 1)
        items = ",\n".join(
            f"{pad}{json.dumps(k, ensure_ascii=False)} : {_jackson(v, depth + 1)}"
            for k, v in value.items()
        )
        return "{\n" + items + "\n" + "  " * depth + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[ ]"
        return "[ " + ", ".join(_jackson(v, depth) for v in value) + " ]"
    return json.dumps(value, ensure_ascii=False)


# ======================================================================================
# Commit metadata
# ======================================================================================


def _int_or(value: Any, default: int) -> int:
    return default if value is None else int(value)


@dataclass(frozen=True)
class WriteStat:
    """One file written by an instant (``HoodieWriteStat`` / ``HoodieDeltaWriteStat``).

    A stat with ``log_version`` set is a log write and carries the delta fields
    (``logVersion``, ``logOffset``, ``baseFile``, ``logFiles``). Paths are relative to the
    table's base path. Null strings in skeleton (inflight) stats read as ``""``.
    """

    file_id: str
    path: str
    partition_path: str
    prev_commit: str
    num_writes: int
    num_inserts: int
    num_update_writes: int
    num_deletes: int
    total_write_bytes: int
    file_size: int
    log_version: int | None = None
    log_offset: int | None = None
    base_file: str | None = None
    log_files: tuple[str, ...] = ()
    total_write_errors: int = 0
    total_log_records: int = 0
    total_log_blocks: int = 0
    total_corrupt_log_blocks: int = 0
    total_rollback_blocks: int = 0
    total_log_files_compacted: int = 0
    total_log_size_compacted: int = 0
    total_updated_records_compacted: int = 0

    @property
    def is_log_write(self) -> bool:
        return self.log_version is not None

    def files(self) -> list[str]:
        """Names of the files this stat wrote (its path, plus log files of a log write)."""
        names = [basename(self.path)] if self.path else []
        names.extend(name for name in self.log_files if name not in names)
        return names

    def to_dict(self) -> dict[str, Any]:
        """The stat as Spark's Jackson serializer orders its fields."""
        out: dict[str, Any] = {
            "fileId": self.file_id,
            "path": self.path,
            "cdcStats": None,
            "prevCommit": self.prev_commit,
            "numWrites": self.num_writes,
            "numDeletes": self.num_deletes,
            "numUpdateWrites": self.num_update_writes,
            "numInserts": self.num_inserts,
            "totalWriteBytes": self.total_write_bytes,
            "totalWriteErrors": self.total_write_errors,
            "tempPath": None,
            "partitionPath": self.partition_path,
            "totalLogRecords": self.total_log_records,
            "totalLogFilesCompacted": self.total_log_files_compacted,
            "totalLogSizeCompacted": self.total_log_size_compacted,
            "totalUpdatedRecordsCompacted": self.total_updated_records_compacted,
            "totalLogBlocks": self.total_log_blocks,
            "totalCorruptLogBlock": self.total_corrupt_log_blocks,
            "totalRollbackBlocks": self.total_rollback_blocks,
            "fileSizeInBytes": self.file_size,
            "minEventTime": None,
            "maxEventTime": None,
            "runtimeStats": dict(_RUNTIME_STATS),
        }
        if self.is_log_write:
            out.update({
                "logVersion": self.log_version,
                "logOffset": self.log_offset or 0,
                "baseFile": self.base_file or "",
                "logFiles": list(self.log_files),
                "recordsStats": {"val": None},
            })
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WriteStat:
        """Read a stat decoded from JSON or Avro (absent fields take their defaults)."""
        log_version = d.get("logVersion")
        return cls(
            file_id=d.get("fileId") or "",
            path=d.get("path") or "",
            partition_path=d.get("partitionPath") or "",
            prev_commit=d.get("prevCommit") or NULL_COMMIT,
            num_writes=_int_or(d.get("numWrites"), 0),
            num_inserts=_int_or(d.get("numInserts"), 0),
            num_update_writes=_int_or(d.get("numUpdateWrites"), 0),
            num_deletes=_int_or(d.get("numDeletes"), 0),
            total_write_bytes=_int_or(d.get("totalWriteBytes"), 0),
            file_size=_int_or(d.get("fileSizeInBytes"), 0),
            log_version=None if log_version is None else int(log_version),
            log_offset=None if d.get("logOffset") is None else int(d["logOffset"]),
            base_file=d.get("baseFile") or None,
            log_files=tuple(d.get("logFiles") or ()),
            total_write_errors=_int_or(d.get("totalWriteErrors"), 0),
            total_log_records=_int_or(d.get("totalLogRecords"), 0),
            total_log_blocks=_int_or(d.get("totalLogBlocks"), 0),
            total_corrupt_log_blocks=_int_or(d.get("totalCorruptLogBlock"), 0),
            total_rollback_blocks=_int_or(d.get("totalRollbackBlocks"), 0),
            total_log_files_compacted=_int_or(d.get("totalLogFilesCompacted"), 0),
            total_log_size_compacted=_int_or(d.get("totalLogSizeCompacted"), 0),
            total_updated_records_compacted=_int_or(d.get("totalUpdatedRecordsCompacted"), 0),
        )


@dataclass(frozen=True)
class CommitMetadata:
    """``HoodieCommitMetadata`` (``HoodieReplaceCommitMetadata`` when files were replaced)."""

    partition_to_write_stats: Mapping[str, tuple[WriteStat, ...]]
    extra_metadata: Mapping[str, str]
    operation_type: str
    compacted: bool = False
    partition_to_replace_file_ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> CommitMetadata:
        """What an empty instant file means."""
        return cls({}, {}, UNKNOWN_OPERATION)

    @property
    def schema(self) -> str | None:
        """The writer's Avro schema (``extraMetadata.schema``), without meta fields."""
        return self.extra_metadata.get("schema") or None

    def write_stats(self) -> list[WriteStat]:
        """Every write stat, partition by partition."""
        return [stat for stats in self.partition_to_write_stats.values() for stat in stats]

    def with_stats(self, stats: Iterable[WriteStat]) -> CommitMetadata:
        """This metadata with ``stats`` as its write stats (grouped by partition, in order)."""
        grouped: dict[str, list[WriteStat]] = {}
        for stat in stats:
            grouped.setdefault(stat.partition_path, []).append(stat)
        return dataclasses.replace(self, partition_to_write_stats={p: tuple(g) for p, g in grouped.items()})

    def files(self) -> list[tuple[str, str]]:
        """``(partition_path, file name)`` of every file this instant wrote."""
        return [
            (partition, name)
            for partition, stats in self.partition_to_write_stats.items()
            for stat in stats
            for name in stat.files()
        ]

    def replaced_file_ids(self) -> list[tuple[str, str]]:
        """``(partition_path, file_id)`` of every file group this instant replaced."""
        return [
            (partition, file_id)
            for partition, file_ids in self.partition_to_replace_file_ids.items()
            for file_id in file_ids
        ]

    def encode(self, layout: int) -> bytes:
        """Instant content for timeline ``layout``: JSON on 1 (table version 6), Avro on 2."""
        return self.to_json() if layout == 1 else self.to_avro()

    @classmethod
    def decode(cls, data: bytes) -> CommitMetadata:
        """Instant content of either layout (Avro or JSON, by content; empty: empty metadata)."""
        return cls.from_avro(data) if is_avro_container(data) else cls.from_json(data)

    def to_avro(self) -> bytes:
        """Table version 8/9 instant content: an Avro container of ``HoodieCommitMetadata``
        (``HoodieReplaceCommitMetadata`` when file groups were replaced)."""
        record: dict[str, Any] = {
            "partitionToWriteStats": {
                partition: [_avro_stat(stat) for stat in stats]
                for partition, stats in self.partition_to_write_stats.items()
            },
            "compacted": self.compacted,
            "extraMetadata": dict(self.extra_metadata),
            "version": 1,
            "operationType": self.operation_type,
        }
        if self.partition_to_replace_file_ids:
            record["partitionToReplaceFileIds"] = {
                p: list(ids) for p, ids in self.partition_to_replace_file_ids.items()
            }
            return write_single_record(REPLACE_COMMIT_METADATA_SCHEMA, record)
        return write_single_record(COMMIT_METADATA_SCHEMA, record)

    def to_json(self) -> bytes:
        """Table version 6 instant content: Jackson-style JSON with Spark's field names."""
        out: dict[str, Any] = {
            "partitionToWriteStats": {
                partition: [stat.to_dict() for stat in stats]
                for partition, stats in self.partition_to_write_stats.items()
            },
            "compacted": self.compacted,
            "extraMetadata": dict(self.extra_metadata),
            "operationType": self.operation_type,
        }
        if self.partition_to_replace_file_ids:
            out["partitionToReplaceFileIds"] = {
                p: list(ids) for p, ids in self.partition_to_replace_file_ids.items()
            }
        return _jackson(out).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> CommitMetadata:
        """Decode table version 6 content; empty content is empty metadata."""
        if not data.strip():
            return cls.empty()
        try:
            decoded = json.loads(data)
        except ValueError as e:
            raise InvalidArgumentError(f"commit metadata is not valid JSON: {e}") from e
        if not isinstance(decoded, dict):
            raise InvalidArgumentError(
                f"commit metadata JSON is a {type(decoded).__name__}, not an object"
            )
        return cls._from_dict(decoded)

    @classmethod
    def from_avro(cls, data: bytes) -> CommitMetadata:
        """Decode an Avro container (table version 8); empty content is empty metadata."""
        if not data:
            return cls.empty()
        record_name, record = read_single_record(data)
        if record_name not in _COMMIT_RECORDS:
            raise InvalidArgumentError(
                f"Avro instant content holds {AVRO_NAMESPACE}.{record_name}, not commit metadata"
            )
        return cls._from_dict(record)

    @classmethod
    def _from_dict(cls, d: Mapping[str, Any]) -> CommitMetadata:
        stats = d.get("partitionToWriteStats") or {}
        replaced = d.get("partitionToReplaceFileIds") or {}
        return cls(
            partition_to_write_stats={
                partition: tuple(WriteStat.from_dict(s) for s in (entries or ()))
                for partition, entries in stats.items()
            },
            extra_metadata={
                k: v for k, v in (d.get("extraMetadata") or {}).items() if v is not None
            },
            operation_type=d.get("operationType") or UNKNOWN_OPERATION,
            compacted=bool(d.get("compacted")),
            partition_to_replace_file_ids={p: tuple(ids or ()) for p, ids in replaced.items()},
        )


# ======================================================================================
# Avro containers and the rollback schemas
# ======================================================================================


def read_single_record(data: bytes) -> tuple[str, dict[str, Any]]:
    """(short record name, the one record) of an Avro object container file (an instant's content)."""
    try:
        reader = fastavro.reader(io.BytesIO(data))
        schema = reader.writer_schema
        records = list(reader)
    except Exception as e:  # fastavro raises ValueError, EOFError, SchemaParseException...
        raise InvalidArgumentError(f"not a readable Avro container file: {e}") from e
    if len(records) != 1:
        raise InvalidArgumentError(f"Avro instant content holds {len(records)} records, expected 1")
    name = schema.get("name", "") if isinstance(schema, dict) else ""
    return name.rsplit(".", 1)[-1], records[0]


def write_single_record(schema: dict[str, Any], record: Mapping[str, Any]) -> bytes:
    """One record as an Avro object container file (codec null), as Hudi writes plans."""
    buffer = io.BytesIO()
    fastavro.writer(buffer, fastavro.parse_schema(schema), [record], codec="null")
    return buffer.getvalue()


_STRINGS = {"type": "array", "items": "string"}
_FILE_SIZES = ["null", {"type": "map", "values": "long"}]
_INSTANT_INFO = {
    "type": "record",
    "name": "HoodieInstantInfo",
    "namespace": AVRO_NAMESPACE,
    "fields": [
        {"name": "commitTime", "type": "string"},
        {"name": "action", "type": "string"},
    ],
}

# Field list of HoodieRollbackPlan.avsc (Hudi 0.11+); HoodieInstantInfo inlined at first use.
ROLLBACK_PLAN_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieRollbackPlan",
    "namespace": AVRO_NAMESPACE,
    "fields": [
        {"name": "instantToRollback", "type": ["null", _INSTANT_INFO], "default": None},
        {
            "name": "RollbackRequests",
            "type": ["null", {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "HoodieRollbackRequest",
                    "fields": [
                        {"name": "partitionPath", "type": "string"},
                        {"name": "fileId", "type": ["null", "string"], "default": None},
                        {"name": "latestBaseInstant", "type": ["null", "string"], "default": None},
                        {"name": "filesToBeDeleted", "type": _STRINGS, "default": []},
                        {"name": "logBlocksToBeDeleted", "type": _FILE_SIZES, "default": None},
                    ],
                },
            }],
            "default": None,
        },
        {"name": "version", "type": ["int", "null"], "default": 1},
    ],
}

# Field list of HoodieRollbackMetadata.avsc (Hudi 0.14/0.15: logFilesFromFailedCommit).
ROLLBACK_METADATA_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieRollbackMetadata",
    "namespace": AVRO_NAMESPACE,
    "fields": [
        {"name": "startRollbackTime", "type": "string"},
        {"name": "timeTakenInMillis", "type": "long"},
        {"name": "totalFilesDeleted", "type": "int"},
        {"name": "commitsRollback", "type": _STRINGS},
        {
            "name": "partitionMetadata",
            "type": {
                "type": "map",
                "values": {
                    "type": "record",
                    "name": "HoodieRollbackPartitionMetadata",
                    "fields": [
                        {"name": "partitionPath", "type": "string"},
                        {"name": "successDeleteFiles", "type": _STRINGS},
                        {"name": "failedDeleteFiles", "type": _STRINGS},
                        {"name": "rollbackLogFiles", "type": _FILE_SIZES, "default": None},
                        {"name": "logFilesFromFailedCommit", "type": _FILE_SIZES, "default": None},
                    ],
                },
            },
        },
        {"name": "version", "type": ["int", "null"], "default": 1},
        {
            "name": "instantsRollback",
            "type": {"type": "array", "items": _INSTANT_INFO},
            "default": [],
        },
    ],
}


def _optional(kind: Any) -> dict[str, Any]:
    return {"type": ["null", kind], "default": None}


_LONG_STATS = (
    "numWrites", "numDeletes", "numUpdateWrites", "totalWriteBytes", "totalWriteErrors",
)
# Field list of HoodieWriteStat (hudi-common/src/main/avro/HoodieCommitMetadata.avsc, Hudi
# 1.x): every field optional.
_WRITE_STAT_FIELDS: tuple[tuple[str, Any], ...] = (
    ("fileId", "string"), ("path", "string"), ("prevCommit", "string"),
    *((name, "long") for name in _LONG_STATS),
    ("partitionPath", "string"), ("totalLogRecords", "long"), ("totalLogFiles", "long"),
    ("totalUpdatedRecordsCompacted", "long"), ("numInserts", "long"), ("totalLogBlocks", "long"),
    ("totalCorruptLogBlock", "long"), ("totalRollbackBlocks", "long"), ("fileSizeInBytes", "long"),
    ("logVersion", "int"), ("logOffset", "long"), ("baseFile", "string"), ("logFiles", _STRINGS),
    ("cdcStats", {"type": "map", "values": "long"}), ("prevBaseFile", "string"),
    ("minEventTime", "long"), ("maxEventTime", "long"),
    ("runtimeStats", {
        "type": "record", "name": "HoodieRuntimeStats",
        "fields": [{"name": n, **_optional("long")} for n in ("totalScanTime", "totalCreateTime", "totalUpsertTime")],
    }),
    ("totalLogFilesCompacted", "long"), ("totalLogReadTimeMs", "long"), ("totalLogSizeCompacted", "long"),
    ("tempPath", "string"), ("numUpdates", "long"),
)
_COMMIT_FIELDS: list[dict[str, Any]] = [
    {"name": "partitionToWriteStats", **_optional({"type": "map", "values": {"type": "array", "items": {
        "type": "record", "name": "HoodieWriteStat",
        "fields": [{"name": name, **_optional(kind)} for name, kind in _WRITE_STAT_FIELDS],
    }}})},
    {"name": "compacted", **_optional("boolean")},
    {"name": "extraMetadata", **_optional({"type": "map", "values": "string"})},
    {"name": "version", "type": ["int", "null"], "default": 1},
    {"name": "operationType", **_optional("string")},
]
# HoodieCommitMetadata.avsc and HoodieReplaceCommitMetadata.avsc (Hudi 1.x field lists).
COMMIT_METADATA_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "HoodieCommitMetadata", "namespace": AVRO_NAMESPACE, "fields": _COMMIT_FIELDS,
}
REPLACE_COMMIT_METADATA_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "HoodieReplaceCommitMetadata", "namespace": AVRO_NAMESPACE,
    "fields": [*_COMMIT_FIELDS,
               {"name": "partitionToReplaceFileIds", **_optional({"type": "map", "values": _STRINGS})}],
}


def _avro_stat(stat: WriteStat) -> dict[str, Any]:
    """A write stat as a ``HoodieWriteStat`` record (fields memtier does not track: null)."""
    values = stat.to_dict()
    return {name: values.get(name) for name, _ in _WRITE_STAT_FIELDS}


def _instant_info(timestamp: str, action: str) -> dict[str, str]:
    return {"commitTime": timestamp, "action": action}


def _frozen_files(files: Mapping[str, Iterable[str]]) -> dict[str, tuple[str, ...]]:
    return {partition: tuple(paths) for partition, paths in files.items()}


@dataclass(frozen=True)
class RollbackPlan:
    """``<t>.rollback.requested``: the instant to undo and the data files to delete.

    ``files_to_delete`` maps partition path to full file paths (as Hudi records them).
    """

    target_timestamp: str
    target_action: str
    files_to_delete: Mapping[str, tuple[str, ...]]

    def to_avro(self) -> bytes:
        return write_single_record(ROLLBACK_PLAN_SCHEMA, {
            "instantToRollback": _instant_info(self.target_timestamp, self.target_action),
            "RollbackRequests": [
                {
                    "partitionPath": partition,
                    "fileId": None,
                    "latestBaseInstant": None,
                    "filesToBeDeleted": list(paths),
                    "logBlocksToBeDeleted": {},
                }
                for partition, paths in self.files_to_delete.items()
            ],
            "version": 1,
        })

    @classmethod
    def from_avro(cls, data: bytes) -> RollbackPlan:
        name, record = read_single_record(data)
        target = record.get("instantToRollback")
        if name != "HoodieRollbackPlan" or target is None:
            raise InvalidArgumentError(
                f"Avro content {name} is not a rollback plan naming its instant"
            )
        files: dict[str, list[str]] = {}
        for request in record.get("RollbackRequests") or ():
            if request.get("logBlocksToBeDeleted"):
                raise UnsupportedTableError(
                    f"rollback plan of {target['commitTime']} rolls back log blocks in"
                    f" {sorted(request['logBlocksToBeDeleted'])}; memtier only deletes files"
                )
            files.setdefault(request["partitionPath"], []).extend(request["filesToBeDeleted"])
        return cls(target["commitTime"], target["action"], _frozen_files(files))


@dataclass(frozen=True)
class RollbackMetadata:
    """``<t>.rollback``: what a completed rollback undid and deleted."""

    start_rollback_time: str
    target_timestamp: str
    target_action: str
    deleted_files: Mapping[str, tuple[str, ...]]
    time_taken_ms: int = -1  # Hudi's value when the duration is unknown

    def to_avro(self) -> bytes:
        return write_single_record(ROLLBACK_METADATA_SCHEMA, {
            "startRollbackTime": self.start_rollback_time,
            "timeTakenInMillis": self.time_taken_ms,
            "totalFilesDeleted": sum(len(paths) for paths in self.deleted_files.values()),
            "commitsRollback": [self.target_timestamp],
            "partitionMetadata": {
                partition: {
                    "partitionPath": partition,
                    "successDeleteFiles": list(paths),
                    "failedDeleteFiles": [],
                    "rollbackLogFiles": {},
                    "logFilesFromFailedCommit": {},
                }
                for partition, paths in self.deleted_files.items()
            },
            "version": 1,
            "instantsRollback": [_instant_info(self.target_timestamp, self.target_action)],
        })

    @classmethod
    def from_avro(cls, data: bytes) -> RollbackMetadata:
        name, record = read_single_record(data)
        if name != "HoodieRollbackMetadata":
            raise InvalidArgumentError(f"Avro content {name} is not rollback metadata")
        commits = record.get("commitsRollback") or []
        instants = record.get("instantsRollback") or []
        if len(commits) != 1:
            raise InvalidArgumentError(
                f"rollback {record['startRollbackTime']} undid {len(commits)} instants; expected 1"
            )
        action = next((i["action"] for i in instants if i["commitTime"] == commits[0]), "")
        return cls(
            start_rollback_time=record["startRollbackTime"],
            target_timestamp=commits[0],
            target_action=action,
            deleted_files=_frozen_files({
                p: m["successDeleteFiles"] for p, m in record["partitionMetadata"].items()
            }),
            time_taken_ms=record["timeTakenInMillis"],
        )
