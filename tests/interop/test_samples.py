"""Interop in: memtier reads every table Apache Hudi wrote in ../shared/hudi-samples."""

from __future__ import annotations

import pytest

from memtier.hudi import HudiTable
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.samples import SAMPLES, Sample, unpack


@pytest.fixture(params=SAMPLES, ids=[s.id for s in SAMPLES])
def sample(request: pytest.FixtureRequest, tmp_path) -> tuple[Sample, str]:
    return request.param, str(unpack(request.param, tmp_path))


def test_snapshot_matches_readme_count_and_hudi_rs(sample: tuple[Sample, str]) -> None:
    info, path = sample
    table = HudiTable.open(path)
    assert table.config.version == info.version
    assert table.config.table_type == info.table_type
    ours = table.read()
    assert ours.num_rows == info.rows
    assert rows(ours) == rows(hudi_rs_read(path), ours.column_names)


def test_read_optimized_matches_hudi_rs(sample: tuple[Sample, str]) -> None:
    _, path = sample
    ours = HudiTable.open(path).read(mode="read_optimized")
    assert rows(ours) == rows(hudi_rs_read(path, "read_optimized"), ours.column_names)


def test_meta_columns_only_when_asked(sample: tuple[Sample, str]) -> None:
    _, path = sample
    table = HudiTable.open(path)
    assert not any(c.startswith("_hoodie_") for c in table.read().column_names)
    with_meta = table.read(include_meta=True)
    assert with_meta.column_names[:5] == [
        "_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key",
        "_hoodie_partition_path", "_hoodie_file_name",
    ]


def test_trips_update_merged_from_avro_log(tmp_path) -> None:
    """The v6 MOR trips table: rider-D's fare was updated to 25.0 in an Avro log block."""
    sample = next(s for s in SAMPLES if s.name == "v6_trips_8i1u")
    table = HudiTable.open(str(unpack(sample, tmp_path)))
    fares = dict(zip(
        table.read(columns=["rider", "fare"]).column("rider").to_pylist(),
        table.read(columns=["rider", "fare"]).column("fare").to_pylist(),
        strict=True,
    ))
    assert fares["rider-D"] == 25.0
    ro = table.read(mode="read_optimized", columns=["rider", "fare"]).to_pylist()
    assert {r["rider"]: r["fare"] for r in ro}["rider-D"] != 25.0
