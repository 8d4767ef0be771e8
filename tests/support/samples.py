"""The Apache Hudi sample tables in ../shared/hudi-samples, unzipped per test on demand.

The samples are never copied into the repository: tests that need them skip, saying why,
when the folder is absent.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

#: ../shared/hudi-samples next to the checkout; MEMTIER_HUDI_SAMPLES points elsewhere.
SAMPLES_DIR = Path(
    os.environ.get("MEMTIER_HUDI_SAMPLES")
    or Path(__file__).resolve().parents[2].parent / "shared" / "hudi-samples"
)


@dataclass(frozen=True)
class Sample:
    """One sample zip and the snapshot row count hudi-rs returns for it (samples README)."""

    zip_path: str  # relative to SAMPLES_DIR
    version: int
    table_type: str
    rows: int

    @property
    def name(self) -> str:
        return Path(self.zip_path).stem

    @property
    def id(self) -> str:
        return self.zip_path.removesuffix(".zip").replace("/", "-")


SAMPLES: tuple[Sample, ...] = (
    Sample("quickstart_trips_table/mor/avro/v6_trips_8i1u.zip", 6, "MERGE_ON_READ", 8),
    Sample("sample_table/cow/v6_complexkeygen_hivestyle.zip", 6, "COPY_ON_WRITE", 4),
    Sample("sample_table/cow/v6_empty.zip", 6, "COPY_ON_WRITE", 0),
    Sample("sample_table/cow/v6_nonpartitioned.zip", 6, "COPY_ON_WRITE", 4),
    Sample("sample_table/cow/v6_simplekeygen_hivestyle_no_metafields.zip", 6, "COPY_ON_WRITE", 4),
    Sample("sample_table/cow/v6_simplekeygen_nonhivestyle.zip", 6, "COPY_ON_WRITE", 4),
    Sample("sample_table/cow/v6_timebasedkeygen_nonhivestyle.zip", 6, "COPY_ON_WRITE", 4),
    Sample("sample_table/mor/parquet/v6_complexkeygen_hivestyle.zip", 6, "MERGE_ON_READ", 4),
    Sample("sample_table/mor/parquet/v6_empty.zip", 6, "MERGE_ON_READ", 0),
    Sample("sample_table/mor/parquet/v6_nonpartitioned.zip", 6, "MERGE_ON_READ", 4),
    Sample(
        "sample_table/mor/parquet/v6_simplekeygen_hivestyle_no_metafields.zip",
        6, "MERGE_ON_READ", 4,
    ),
    Sample("sample_table/mor/parquet/v6_simplekeygen_nonhivestyle.zip", 6, "MERGE_ON_READ", 4),
    Sample(
        "sample_table/mor/parquet/v6_simplekeygen_nonhivestyle_overwritetable.zip",
        6, "MERGE_ON_READ", 1,
    ),
    Sample("sample_table/cow/v8_empty.zip", 8, "COPY_ON_WRITE", 0),
    Sample("sample_table/cow/v8_nonpartitioned.zip", 8, "COPY_ON_WRITE", 4),
    Sample("sample_table/cow/v8_simplekeygen_hivestyle_no_metafields.zip", 8, "COPY_ON_WRITE", 4),
    Sample("sample_table/cow/v8_simplekeygen_nonhivestyle.zip", 8, "COPY_ON_WRITE", 4),
)


def require_samples() -> Path:
    """The samples folder, or skip the calling test saying why."""
    if not SAMPLES_DIR.is_dir():
        pytest.skip(
            f"Hudi samples folder {SAMPLES_DIR} is absent on this machine "
            "(set MEMTIER_HUDI_SAMPLES to where ../shared/hudi-samples is)"
        )
    return SAMPLES_DIR


def unpack(sample: Sample, dest: Path) -> Path:
    """Unzip ``sample`` below ``dest`` (skipping macOS junk); returns the table's base path."""
    zip_file = require_samples() / sample.zip_path
    if not zip_file.is_file():
        pytest.skip(f"Hudi sample {zip_file} is absent on this machine")
    with zipfile.ZipFile(zip_file) as archive:
        members = [m for m in archive.namelist() if not m.startswith("__MACOSX/")]
        archive.extractall(dest, members=members)
    table_dir = dest / sample.name
    if not (table_dir / ".hoodie").is_dir():
        raise AssertionError(f"{zip_file} did not unpack to {table_dir}/.hoodie")
    return table_dir
