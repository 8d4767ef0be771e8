"""Hudi data file names: parsing, formatting, classification, log file order."""

from __future__ import annotations

import os

import pytest

from memtier.errors import InvalidArgumentError
from memtier.hudi.filenames import (
    BaseFile,
    LogFile,
    WriteToken,
    bucket_file_id,
    bucket_of_file_id,
    classify,
)
from tests.support.samples import SAMPLES, Sample, unpack

BASE_NAME = "d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0_0-13-60_20250331030642808.parquet"
LOG_NAME = ".d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0_20250331030642808.log.1_0-26-85"


def test_base_file_parses_into_its_parts() -> None:
    base = BaseFile.parse(BASE_NAME)
    assert base == BaseFile(
        "d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0", "0-13-60", "20250331030642808", "parquet"
    )
    assert base.name == BASE_NAME


def test_log_file_parses_into_its_parts() -> None:
    log = LogFile.parse(LOG_NAME)
    assert log == LogFile("d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0", "20250331030642808", 1, "0-26-85")
    assert log.name == LOG_NAME


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (".f-0_20240101000000000.log.3", LogFile("f-0", "20240101000000000", 3, None)),
        (".f-0_20240101000000000.log.12_1-0-1", LogFile("f-0", "20240101000000000", 12, "1-0-1")),
        (".f-0_20240101000000000.log.1_0-1-2.cdc", LogFile("f-0", "20240101000000000", 1, "0-1-2", cdc=True)),
        (".f-0_20240101000000000.archive.2_0-1-2", LogFile("f-0", "20240101000000000", 2, "0-1-2", "archive")),
    ],
)
def test_log_file_variants_round_trip(name: str, expected: LogFile) -> None:
    assert LogFile.parse(name) == expected
    assert expected.name == name
    assert classify(name) == expected


def test_bucket_style_file_id_is_a_file_id() -> None:
    name = "00000003-9f2c-4a1e-b7d1-2e3f4a5b6c7d-0_0-0-0_20240101000000000.parquet"
    assert BaseFile.parse(name).file_id == "00000003-9f2c-4a1e-b7d1-2e3f4a5b6c7d-0"


@pytest.mark.parametrize(
    "name",
    [
        ".hoodie_partition_metadata",
        ".hoodie_partition_metadata.parquet",
        ".memtier-tmp-0123abcd-" + BASE_NAME,
        ".memtier-tmp-0123abcd-" + LOG_NAME,
        "." + BASE_NAME + ".crc",
        "." + LOG_NAME + ".crc",
        BASE_NAME + ".crc",
        "part-00000-abc.snappy.parquet",
        "f_0-1-2_2024.parquet.tmp",
        "f_0-1_20240101000000000.parquet",  # two-part write token
        "a.b_0-1-2_20240101000000000.parquet",  # "." in file id
        ".f-0_20240101000000000.log.01_0-1-2",  # leading zero in the version
        ".f-0_20240101000000000.log.1_0-1-2.cdc.crc",
        "",
    ],
)
def test_classify_returns_none_for_other_files(name: str) -> None:
    assert classify(name) is None


def test_classify_tells_base_from_log() -> None:
    assert isinstance(classify(BASE_NAME), BaseFile)
    assert isinstance(classify(LOG_NAME), LogFile)


@pytest.mark.parametrize("name", [LOG_NAME, "x.parquet", "f_0-1-2_2024", ""])
def test_base_file_parse_rejects_non_base_names(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match="not a Hudi base file name"):
        BaseFile.parse(name)


@pytest.mark.parametrize("name", [BASE_NAME, ".f_2024.log", ".f_2024.log.x_0-1-2", ""])
def test_log_file_parse_rejects_non_log_names(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match="not a Hudi log file name"):
        LogFile.parse(name)


@pytest.mark.parametrize("file_id", ["a_b", "a.b", "", "a/b"])
def test_file_ids_with_separators_are_refused(file_id: str) -> None:
    with pytest.raises(InvalidArgumentError, match="file id"):
        BaseFile(file_id, "0-0-0", "20240101000000000")
    with pytest.raises(InvalidArgumentError, match="file id"):
        LogFile(file_id, "20240101000000000", 1, "0-0-0")


def test_other_bad_parts_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="write token"):
        BaseFile("f-0", "0-0", "20240101000000000")
    with pytest.raises(InvalidArgumentError, match="instant time"):
        BaseFile("f-0", "0-0-0", "2024-01-01")
    with pytest.raises(InvalidArgumentError, match="log version"):
        LogFile("f-0", "20240101000000000", -1, None)
    with pytest.raises(InvalidArgumentError, match="log extension"):
        LogFile("f-0", "20240101000000000", 1, None, extension="parquet")
    with pytest.raises(InvalidArgumentError, match="cdc"):
        LogFile("f-0", "20240101000000000", 1, None, cdc=True)


def test_write_token_round_trips() -> None:
    token = WriteToken.parse("0-13-60")
    assert token == WriteToken(0, 13, 60)
    assert str(token) == "0-13-60"
    for bad in ("0-13", "a-b-c", "0-1-2-3", "-1-2-3"):
        with pytest.raises(InvalidArgumentError, match="write token"):
            WriteToken.parse(bad)
    with pytest.raises(InvalidArgumentError):
        WriteToken(-1, 0, 0)


def test_log_files_sort_like_hudi() -> None:
    names = [
        ".f-0_20240102000000000.log.1_0-1-0",
        ".f-0_20240101000000000.log.10_0-1-0",
        ".f-0_20240101000000000.log.2_1-0-1",
        ".f-0_20240101000000000.log.2_0-5-9",
        ".f-0_20240101000000000.log.2",
        ".f-0_20240101000000000.log.1_0-1-0",
    ]
    ordered = sorted((LogFile.parse(n) for n in names), key=LogFile.sort_key)
    assert [f.name for f in ordered] == [
        ".f-0_20240101000000000.log.1_0-1-0",
        ".f-0_20240101000000000.log.2",  # no write token sorts first (Java nullsFirst)
        ".f-0_20240101000000000.log.2_0-5-9",
        ".f-0_20240101000000000.log.2_1-0-1",
        ".f-0_20240101000000000.log.10_0-1-0",  # versions compare as numbers
        ".f-0_20240102000000000.log.1_0-1-0",
    ]


def test_bucket_file_ids() -> None:
    file_id = bucket_file_id(3)
    assert file_id == "00000003-0000-0000-0000-000000000000-0"
    assert bucket_of_file_id(file_id) == 3
    assert bucket_of_file_id("00000003-b7d1-2e3f-4a5b-6c7d8e9f0a1b-0") == 3  # Hudi 0.x style
    assert bucket_of_file_id(bucket_file_id(12345678)) == 12345678
    assert BaseFile(file_id, "0-0-0", "20240101000000000").file_id == file_id
    for bad in (-1, 10**8, True):
        with pytest.raises(InvalidArgumentError, match="bucket"):
            bucket_file_id(bad)
    with pytest.raises(InvalidArgumentError, match="not a bucket-index file id"):
        bucket_of_file_id("d0304c53-6fd2-4b7a-a9d6-5ff632f79224-0")


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_every_sample_data_file_is_classified_and_round_trips(sample: Sample, tmp_path) -> None:
    table = unpack(sample, tmp_path)
    seen = 0
    for directory, dirs, files in os.walk(table):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        for name in files:
            parsed = classify(name)
            if name.startswith(".hoodie_partition_metadata") or name == ".DS_Store":
                assert parsed is None
                continue
            assert parsed is not None, f"{directory}/{name} not recognised"
            assert parsed.name == name
            seen += 1
    assert (seen > 0) == (sample.rows > 0)
