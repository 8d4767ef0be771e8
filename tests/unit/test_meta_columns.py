"""The meta columns a flush or compaction writes: sequence numbers ``<instant>_<task>_<row>``
built in bulk must equal the plain formatting at every digit-count boundary."""

from __future__ import annotations

import pyarrow as pa
import pytest

from memtier.hudi.basefile import with_meta_columns


@pytest.mark.parametrize("rows", [0, 1, 9, 10, 100, 9_999, 10_000, 10_001, 20_000, 99_999, 100_000, 123_457])
def test_sequence_numbers_and_generated_keys(rows: int) -> None:
    data = pa.table({"v": pa.array(range(rows), pa.int64())})
    table = with_meta_columns(data, instant="20261126194000123", task=7, key_fields=[], partition_path="p",
                              file_name="f")
    want = [f"20261126194000123_7_{i}" for i in range(rows)]
    assert table.column("_hoodie_commit_seqno").to_pylist() == want
    assert table.column("_hoodie_record_key").to_pylist() == want  # an append-only table's keys
