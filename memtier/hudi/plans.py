"""What table-service instants hold: compaction, clustering and clean plans, clean metadata.

All are Avro object container files with one record, on every table version, with the
field lists of apache/hudi ``hudi-common/src/main/avro/*.avsc``:

* ``<t>.compaction.requested``: ``HoodieCompactionPlan`` (version 2: file names, not
  paths); the compaction completes as ``<t>.commit`` (JSON commit metadata, compacted);
* ``<t>.replacecommit.requested`` of a clustering: ``HoodieRequestedReplaceMetadata``
  with operation ``CLUSTER`` and a ``HoodieClusteringPlan`` (slice files as full paths);
* ``<t>.clean.requested`` and ``.inflight``: ``HoodieCleanerPlan`` (version 2: full
  paths per partition); ``<t>.clean``: ``HoodieCleanMetadata`` (version 2: file names).

Encoding only: which slices to compact, cluster or clean is :mod:`memtier.compaction`'s job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memtier.errors import InvalidArgumentError
from memtier.hudi.commit import AVRO_NAMESPACE, read_single_record, write_single_record

__all__ = [
    "CLUSTER_OPERATION",
    "CleanMetadata",
    "CleanerPlan",
    "ClusteringGroup",
    "ClusteringPlan",
    "CompactionOperation",
    "CompactionPlan",
    "SliceInfo",
]

#: ``operationType`` of a requested replacecommit that is a clustering.
CLUSTER_OPERATION = "CLUSTER"
_COMPACTION_PLAN_VERSION = 2  # CompactionUtils.LATEST_COMPACTION_METADATA_VERSION
_CLEAN_PLAN_VERSION = 2  # CleanPlanV2MigrationHandler.VERSION
_CLEAN_METADATA_VERSION = 2  # CleanMetadataV2MigrationHandler.VERSION
_CLUSTERING_PLAN_VERSION = 1
_CLUSTERING_STRATEGY = "org.apache.hudi.client.clustering.run.strategy.SparkSortAndSizeExecutionStrategy"
#: Strategy parameter naming the sort columns (Hudi's ``hoodie.clustering.plan.strategy.sort.columns``).
SORT_COLUMNS_PARAM = "hoodie.clustering.plan.strategy.sort.columns"

_STRING = ["null", "string"]
_STRINGS = {"type": "array", "items": "string"}
_STRING_MAP = ["null", {"type": "map", "values": "string"}]
_METRICS = ["null", {"type": "map", "values": "double"}]
_VERSION = {"name": "version", "type": ["int", "null"], "default": 1}


def _decode(data: bytes, record_name: str) -> dict[str, Any]:
    name, record = read_single_record(data)
    if name != record_name:
        raise InvalidArgumentError(f"Avro content holds {name}, not {AVRO_NAMESPACE}.{record_name}")
    return record


# == compaction ========================================================================

COMPACTION_PLAN_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCompactionPlan",
    "namespace": AVRO_NAMESPACE,
    "fields": [
        {"name": "operations", "type": ["null", {"type": "array", "items": {
            "type": "record",
            "name": "HoodieCompactionOperation",
            "fields": [
                {"name": "baseInstantTime", "type": _STRING},
                {"name": "deltaFilePaths", "type": ["null", _STRINGS], "default": None},
                {"name": "dataFilePath", "type": _STRING, "default": None},
                {"name": "fileId", "type": _STRING},
                {"name": "partitionPath", "type": _STRING, "default": None},
                {"name": "metrics", "type": _METRICS, "default": None},
                {"name": "externalDataFilePath", "type": _STRING, "default": None},
            ],
        }}], "default": None},
        {"name": "extraMetadata", "type": _STRING_MAP, "default": None},
        _VERSION,
    ],
}


@dataclass(frozen=True)
class CompactionOperation:
    """One file slice to compact: its base file (None for a log-only slice) and log files,
    by name, in log order."""

    partition_path: str
    file_id: str
    base_instant: str
    base_file: str | None
    log_files: tuple[str, ...]
    metrics: Mapping[str, float] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        return {
            "baseInstantTime": self.base_instant,
            "deltaFilePaths": list(self.log_files),
            "dataFilePath": self.base_file,
            "fileId": self.file_id,
            "partitionPath": self.partition_path,
            "metrics": dict(self.metrics),
            "externalDataFilePath": None,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any], version: int) -> CompactionOperation:
        def name(path: str) -> str:  # version 1 plans hold full paths
            return path.rsplit("/", 1)[-1] if version < 2 else path

        base = record.get("dataFilePath") or None
        return cls(
            partition_path=record.get("partitionPath") or "",
            file_id=record["fileId"],
            base_instant=record["baseInstantTime"],
            base_file=name(base) if base else None,
            log_files=tuple(name(p) for p in record.get("deltaFilePaths") or ()),
            metrics=dict(record.get("metrics") or {}),
        )


@dataclass(frozen=True)
class CompactionPlan:
    """``HoodieCompactionPlan``: the slices one compaction instant rewrites."""

    operations: tuple[CompactionOperation, ...]
    extra_metadata: Mapping[str, str] = field(default_factory=dict)

    def to_avro(self) -> bytes:
        return write_single_record(COMPACTION_PLAN_SCHEMA, {
            "operations": [op.to_record() for op in self.operations],
            "extraMetadata": dict(self.extra_metadata),
            "version": _COMPACTION_PLAN_VERSION,
        })

    @classmethod
    def from_avro(cls, data: bytes) -> CompactionPlan:
        record = _decode(data, "HoodieCompactionPlan")
        version = record.get("version") or 1
        return cls(
            tuple(CompactionOperation.from_record(op, version) for op in record.get("operations") or ()),
            dict(record.get("extraMetadata") or {}),
        )

    def file_groups(self) -> list[tuple[str, str]]:
        return [(op.partition_path, op.file_id) for op in self.operations]


# == clustering ========================================================================

_SLICE_INFO = {
    "type": "record",
    "name": "HoodieSliceInfo",
    "fields": [
        {"name": "dataFilePath", "type": _STRING, "default": None},
        {"name": "deltaFilePaths", "type": ["null", _STRINGS], "default": None},
        {"name": "fileId", "type": _STRING},
        {"name": "partitionPath", "type": _STRING, "default": None},
        {"name": "bootstrapFilePath", "type": _STRING, "default": None},
        _VERSION,
    ],
}
_CLUSTERING_PLAN = {
    "type": "record",
    "name": "HoodieClusteringPlan",
    "fields": [
        {"name": "inputGroups", "type": ["null", {"type": "array", "items": {
            "type": "record",
            "name": "HoodieClusteringGroup",
            "fields": [
                {"name": "slices", "type": ["null", {"type": "array", "items": _SLICE_INFO}], "default": None},
                {"name": "metrics", "type": _METRICS, "default": None},
                {"name": "numOutputFileGroups", "type": ["int", "null"], "default": 1},
                _VERSION,
            ],
        }}], "default": None},
        {"name": "strategy", "type": [{
            "type": "record",
            "name": "HoodieClusteringStrategy",
            "fields": [
                {"name": "strategyClassName", "type": _STRING, "default": None},
                {"name": "strategyParams", "type": _STRING_MAP, "default": None},
                _VERSION,
            ],
        }, "null"], "default": None},
        {"name": "extraMetadata", "type": _STRING_MAP, "default": None},
        _VERSION,
    ],
}
REQUESTED_REPLACE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieRequestedReplaceMetadata",
    "namespace": AVRO_NAMESPACE,
    "fields": [
        {"name": "operationType", "type": _STRING, "default": None},
        {"name": "clusteringPlan", "type": [_CLUSTERING_PLAN, "null"], "default": None},
        {"name": "extraMetadata", "type": _STRING_MAP, "default": None},
        _VERSION,
    ],
}


@dataclass(frozen=True)
class SliceInfo:
    """One input file slice of a clustering: paths relative to the table's base path."""

    partition_path: str
    file_id: str
    base_file: str | None  # file name
    log_files: tuple[str, ...] = ()  # file names

    def to_record(self, base_path: str) -> dict[str, Any]:
        def path(name: str) -> str:
            return "/".join(p for p in (base_path, self.partition_path, name) if p)

        return {
            "dataFilePath": path(self.base_file) if self.base_file else "",
            "deltaFilePaths": [path(n) for n in self.log_files],
            "fileId": self.file_id,
            "partitionPath": self.partition_path,
            "bootstrapFilePath": "",
            "version": 1,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SliceInfo:
        base = record.get("dataFilePath") or ""
        return cls(
            partition_path=record.get("partitionPath") or "",
            file_id=record["fileId"],
            base_file=base.rsplit("/", 1)[-1] if base else None,
            log_files=tuple(p.rsplit("/", 1)[-1] for p in record.get("deltaFilePaths") or ()),
        )


@dataclass(frozen=True)
class ClusteringGroup:
    """File slices rewritten together into ``output_groups`` new file groups."""

    slices: tuple[SliceInfo, ...]
    output_groups: int = 1
    metrics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusteringPlan:
    """A clustering's plan, as the requested replacecommit holds it."""

    groups: tuple[ClusteringGroup, ...]
    sort_columns: tuple[str, ...] = ()
    extra_metadata: Mapping[str, str] = field(default_factory=dict)

    def to_avro(self, base_path: str) -> bytes:
        params = {SORT_COLUMNS_PARAM: ",".join(self.sort_columns)} if self.sort_columns else {}
        plan = {
            "inputGroups": [
                {
                    "slices": [s.to_record(base_path) for s in g.slices],
                    "metrics": dict(g.metrics),
                    "numOutputFileGroups": g.output_groups,
                    "version": 1,
                }
                for g in self.groups
            ],
            "strategy": {"strategyClassName": _CLUSTERING_STRATEGY, "strategyParams": params, "version": 1},
            "extraMetadata": dict(self.extra_metadata),
            "version": _CLUSTERING_PLAN_VERSION,
        }
        return write_single_record(REQUESTED_REPLACE_SCHEMA, {
            "operationType": CLUSTER_OPERATION,
            "clusteringPlan": plan,
            "extraMetadata": {},
            "version": 1,
        })

    @classmethod
    def from_avro(cls, data: bytes) -> ClusteringPlan:
        """The plan of a requested clustering; :class:`InvalidArgumentError` for any other
        requested replacecommit (an insert overwrite holds no plan)."""
        record = _decode(data, "HoodieRequestedReplaceMetadata")
        plan = record.get("clusteringPlan")
        if record.get("operationType") != CLUSTER_OPERATION or plan is None:
            raise InvalidArgumentError(f"requested replacecommit is a {record.get('operationType')}, not a clustering")
        params = (plan.get("strategy") or {}).get("strategyParams") or {}
        sort = tuple(c for c in (params.get(SORT_COLUMNS_PARAM) or "").split(",") if c)
        groups = tuple(
            ClusteringGroup(
                tuple(SliceInfo.from_record(s) for s in g.get("slices") or ()),
                int(g.get("numOutputFileGroups") or 1),
                dict(g.get("metrics") or {}),
            )
            for g in plan.get("inputGroups") or ()
        )
        return cls(groups, sort, dict(plan.get("extraMetadata") or {}))

    def file_groups(self) -> list[tuple[str, str]]:
        return [(s.partition_path, s.file_id) for g in self.groups for s in g.slices]


# == clean =============================================================================

_ACTION_INSTANT = {
    "type": "record",
    "name": "HoodieActionInstant",
    "fields": [
        {"name": "timestamp", "type": "string"},
        {"name": "action", "type": "string"},
        {"name": "state", "type": "string"},
    ],
}
CLEANER_PLAN_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCleanerPlan",
    "namespace": AVRO_NAMESPACE,
    "fields": [
        {"name": "earliestInstantToRetain", "type": ["null", _ACTION_INSTANT], "default": None},
        {"name": "policy", "type": "string"},
        {"name": "filesToBeDeletedPerPartition", "type": ["null", {"type": "map", "values": _STRINGS}],
         "default": None},
        _VERSION,
        {"name": "filePathsToBeDeletedPerPartition", "type": ["null", {"type": "map", "values": {
            "type": "array",
            "items": {
                "type": "record",
                "name": "HoodieCleanFileInfo",
                "fields": [
                    {"name": "filePath", "type": _STRING, "default": None},
                    {"name": "isBootstrapBaseFile", "type": ["null", "boolean"], "default": None},
                ],
            },
        }}], "default": None},
        {"name": "partitionsToBeDeleted", "type": ["null", _STRINGS], "default": None},
    ],
}
_CLEAN_PARTITION = {
    "type": "record",
    "name": "HoodieCleanPartitionMetadata",
    "fields": [
        {"name": "partitionPath", "type": "string"},
        {"name": "policy", "type": "string"},
        {"name": "deletePathPatterns", "type": _STRINGS},
        {"name": "successDeleteFiles", "type": _STRINGS},
        {"name": "failedDeleteFiles", "type": _STRINGS},
        {"name": "isPartitionDeleted", "type": ["null", "boolean"], "default": None},
    ],
}
CLEAN_METADATA_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCleanMetadata",
    "namespace": AVRO_NAMESPACE,
    "fields": [
        {"name": "startCleanTime", "type": "string"},
        {"name": "timeTakenInMillis", "type": "long"},
        {"name": "totalFilesDeleted", "type": "int"},
        {"name": "earliestCommitToRetain", "type": "string"},
        {"name": "lastCompletedCommitTimestamp", "type": "string", "default": ""},
        {"name": "partitionMetadata", "type": {"type": "map", "values": _CLEAN_PARTITION}},
        _VERSION,
        {"name": "bootstrapPartitionMetadata", "type": ["null", {"type": "map", "values": "HoodieCleanPartitionMetadata"}],
         "default": None},
    ],
}
#: Hudi's cleaning policy names.
KEEP_LATEST_FILE_VERSIONS = "KEEP_LATEST_FILE_VERSIONS"


@dataclass(frozen=True)
class CleanerPlan:
    """``HoodieCleanerPlan``: files to delete per partition (paths relative to the table)."""

    policy: str
    files: Mapping[str, tuple[str, ...]]  # partition -> file names
    earliest_instant_to_retain: tuple[str, str] | None = None  # (timestamp, action), completed

    def to_avro(self, base_path: str) -> bytes:
        def path(partition: str, name: str) -> str:
            return "/".join(p for p in (base_path, partition, name) if p)

        earliest = None
        if self.earliest_instant_to_retain is not None:
            timestamp, action = self.earliest_instant_to_retain
            earliest = {"timestamp": timestamp, "action": action, "state": "COMPLETED"}
        return write_single_record(CLEANER_PLAN_SCHEMA, {
            "earliestInstantToRetain": earliest,
            "policy": self.policy,
            "filesToBeDeletedPerPartition": {},
            "version": _CLEAN_PLAN_VERSION,
            "filePathsToBeDeletedPerPartition": {
                partition: [{"filePath": path(partition, n), "isBootstrapBaseFile": False} for n in names]
                for partition, names in self.files.items()
            },
            "partitionsToBeDeleted": [],
        })

    @classmethod
    def from_avro(cls, data: bytes) -> CleanerPlan:
        record = _decode(data, "HoodieCleanerPlan")
        files: dict[str, tuple[str, ...]] = {}
        for partition, infos in (record.get("filePathsToBeDeletedPerPartition") or {}).items():
            files[partition] = tuple(i["filePath"].rsplit("/", 1)[-1] for i in infos if i.get("filePath"))
        for partition, paths in (record.get("filesToBeDeletedPerPartition") or {}).items():
            files[partition] = files.get(partition, ()) + tuple(p.rsplit("/", 1)[-1] for p in paths)
        earliest = record.get("earliestInstantToRetain")
        return cls(
            record["policy"], files,
            (earliest["timestamp"], earliest["action"]) if earliest else None,
        )

    @property
    def file_count(self) -> int:
        return sum(len(names) for names in self.files.values())


@dataclass(frozen=True)
class CleanMetadata:
    """``HoodieCleanMetadata``: what a completed clean deleted (file names per partition)."""

    start_clean_time: str
    policy: str
    deleted: Mapping[str, tuple[str, ...]]
    failed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    earliest_commit_to_retain: str = ""
    last_completed_commit: str = ""
    time_taken_ms: int = -1

    def to_avro(self) -> bytes:
        partitions = sorted(set(self.deleted) | set(self.failed))
        return write_single_record(CLEAN_METADATA_SCHEMA, {
            "startCleanTime": self.start_clean_time,
            "timeTakenInMillis": self.time_taken_ms,
            "totalFilesDeleted": sum(len(n) for n in self.deleted.values()),
            "earliestCommitToRetain": self.earliest_commit_to_retain,
            "lastCompletedCommitTimestamp": self.last_completed_commit,
            "partitionMetadata": {
                p: {
                    "partitionPath": p,
                    "policy": self.policy,
                    "deletePathPatterns": [*self.deleted.get(p, ()), *self.failed.get(p, ())],
                    "successDeleteFiles": list(self.deleted.get(p, ())),
                    "failedDeleteFiles": list(self.failed.get(p, ())),
                    "isPartitionDeleted": False,
                }
                for p in partitions
            },
            "version": _CLEAN_METADATA_VERSION,
            "bootstrapPartitionMetadata": {},
        })

    @classmethod
    def from_avro(cls, data: bytes) -> CleanMetadata:
        record = _decode(data, "HoodieCleanMetadata")
        partitions = record.get("partitionMetadata") or {}
        policy = next((m["policy"] for m in partitions.values() if m.get("policy")), KEEP_LATEST_FILE_VERSIONS)
        return cls(
            start_clean_time=record["startCleanTime"],
            policy=policy,
            deleted={p: tuple(m["successDeleteFiles"]) for p, m in partitions.items()},
            failed={p: tuple(m["failedDeleteFiles"]) for p, m in partitions.items() if m["failedDeleteFiles"]},
            earliest_commit_to_retain=record.get("earliestCommitToRetain") or "",
            last_completed_commit=record.get("lastCompletedCommitTimestamp") or "",
            time_taken_ms=record["timeTakenInMillis"],
        )
