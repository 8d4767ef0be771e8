"""The table-service instant contents (compaction, clustering and cleaner plans, clean
metadata): Avro containers with Hudi's record names and field lists, read back as written."""

from __future__ import annotations

import io

import fastavro
import pytest

from memtier.errors import InvalidArgumentError
from memtier.hudi.plans import (
    CleanerPlan,
    CleanMetadata,
    ClusteringGroup,
    ClusteringPlan,
    CompactionOperation,
    CompactionPlan,
    SliceInfo,
)

BASE = "/data/t"
BASE_FILE = "00000001-0000-0000-0000-000000000000-0_0-0-0_20260101000000000.parquet"
LOG = ".00000001-0000-0000-0000-000000000000-0_20260101000000000.log.1_0-0-0"


def _record(data: bytes) -> tuple[str, dict]:
    reader = fastavro.reader(io.BytesIO(data))
    return reader.writer_schema["name"], next(iter(reader))


def test_a_compaction_plan_is_a_version_2_hoodie_compaction_plan_of_file_names() -> None:
    op = CompactionOperation("city=a", "00000001-0000-0000-0000-000000000000-0", "20260101000000000",
                             BASE_FILE, (LOG,), {"TOTAL_LOG_FILES": 1.0})
    data = CompactionPlan((op,)).to_avro()
    name, record = _record(data)
    assert name == "org.apache.hudi.avro.model.HoodieCompactionPlan"
    assert record["version"] == 2
    assert record["operations"][0]["dataFilePath"] == BASE_FILE
    assert record["operations"][0]["deltaFilePaths"] == [LOG]
    assert CompactionPlan.from_avro(data) == CompactionPlan((op,))


def test_a_version_1_compaction_operation_with_full_paths_reads_as_file_names() -> None:
    op = CompactionOperation("p", "f-0", "001", f"{BASE}/p/{BASE_FILE}", (f"{BASE}/p/{LOG}",))
    legacy = CompactionOperation.from_record(op.to_record(), version=1)
    assert (legacy.base_file, legacy.log_files) == (BASE_FILE, (LOG,))


def test_a_clustering_plan_is_a_requested_replace_of_operation_cluster_with_full_paths() -> None:
    slices = (SliceInfo("city=a", "f1-0", BASE_FILE, (LOG,)), SliceInfo("city=a", "f2-0", None, (LOG,)))
    plan = ClusteringPlan((ClusteringGroup(slices, 2, {"TOTAL_SIZE": 10.0}),), ("name",))
    data = plan.to_avro(BASE)
    name, record = _record(data)
    assert name == "org.apache.hudi.avro.model.HoodieRequestedReplaceMetadata"
    assert record["operationType"] == "CLUSTER"
    first = record["clusteringPlan"]["inputGroups"][0]["slices"][0]
    assert first["dataFilePath"] == f"{BASE}/city=a/{BASE_FILE}"
    assert record["clusteringPlan"]["strategy"]["strategyParams"] == {
        "hoodie.clustering.plan.strategy.sort.columns": "name"}
    back = ClusteringPlan.from_avro(data)
    assert back.sort_columns == ("name",)
    assert back.groups[0].slices == slices
    assert back.file_groups() == [("city=a", "f1-0"), ("city=a", "f2-0")]


def test_a_requested_replace_that_is_not_a_clustering_is_refused_as_a_plan() -> None:
    from memtier.hudi.commit import write_single_record
    from memtier.hudi.plans import REQUESTED_REPLACE_SCHEMA

    data = write_single_record(REQUESTED_REPLACE_SCHEMA, {
        "operationType": "INSERT_OVERWRITE", "clusteringPlan": None, "extraMetadata": {}, "version": 1})
    with pytest.raises(InvalidArgumentError, match="not a clustering"):
        ClusteringPlan.from_avro(data)


def test_a_cleaner_plan_holds_full_paths_and_reads_back_as_file_names() -> None:
    plan = CleanerPlan("KEEP_LATEST_FILE_VERSIONS", {"city=a": (BASE_FILE, LOG), "": (BASE_FILE,)})
    data = plan.to_avro(BASE)
    name, record = _record(data)
    assert name == "org.apache.hudi.avro.model.HoodieCleanerPlan"
    assert record["version"] == 2
    assert record["filePathsToBeDeletedPerPartition"]["city=a"][0]["filePath"] == f"{BASE}/city=a/{BASE_FILE}"
    assert record["filePathsToBeDeletedPerPartition"][""][0]["filePath"] == f"{BASE}/{BASE_FILE}"
    assert CleanerPlan.from_avro(data) == plan
    assert plan.file_count == 3


def test_clean_metadata_records_deleted_and_failed_file_names_per_partition() -> None:
    metadata = CleanMetadata("002", "KEEP_LATEST_FILE_VERSIONS", {"a": (BASE_FILE,)}, {"a": (LOG,)},
                             last_completed_commit="001", time_taken_ms=5)
    data = metadata.to_avro()
    name, record = _record(data)
    assert name == "org.apache.hudi.avro.model.HoodieCleanMetadata"
    assert record["totalFilesDeleted"] == 1
    assert record["partitionMetadata"]["a"]["successDeleteFiles"] == [BASE_FILE]
    assert record["partitionMetadata"]["a"]["deletePathPatterns"] == [BASE_FILE, LOG]
    assert CleanMetadata.from_avro(data) == metadata


def test_a_plan_of_the_wrong_kind_is_refused_by_name() -> None:
    data = CleanerPlan("KEEP_LATEST_FILE_VERSIONS", {}).to_avro(BASE)
    with pytest.raises(InvalidArgumentError, match="HoodieCleanerPlan, not"):
        CompactionPlan.from_avro(data)
