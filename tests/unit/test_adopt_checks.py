"""What adoption refuses (memtier/hudi/adopt.py), each refusal naming what to do."""

from __future__ import annotations

import pyarrow as pa
import pytest

from memtier.errors import UnsupportedTableError
from memtier.hudi import HudiTable
from memtier.hudi.adopt import check_adoptable, fits_buckets
from memtier.hudi.fsview import FileSystemView
from memtier.io import join

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("p", pa.string())])
ROWS = pa.table({"id": [1, 2, 3, 4], "ts": [1] * 4, "p": ["a", "a", "b", "b"]}, schema=SCHEMA)


def _table(path: str, table_type: str = "MERGE_ON_READ", version: int = 9) -> HudiTable:
    table = HudiTable.create(path, SCHEMA, record_key="id", ordering_field="ts", partition_fields="p",
                             buckets=4, table_type=table_type, table_version=version)
    table.write(ROWS)
    return table


def test_a_plain_table_is_taken_and_fits_its_buckets(tmp_path) -> None:
    table = _table(str(tmp_path / "t"))
    check_adoptable(table.meta)
    view = FileSystemView.build(table.io, table.path, table.timeline())
    assert fits_buckets(view, 4) and not fits_buckets(view, 1)


def test_a_consistent_hashing_bucket_index_is_refused(tmp_path) -> None:
    table = _table(str(tmp_path / "t"))
    table.io.write_atomic(join(table.path, ".hoodie", ".bucket_index", "consistent_hashing_metadata", "p", "x"), b"")
    with pytest.raises(UnsupportedTableError, match="consistent-hashing.*hoodie.index.bucket.engine=SIMPLE"):
        check_adoptable(table.meta)


def test_a_pending_table_service_is_refused(tmp_path) -> None:
    table = _table(str(tmp_path / "t"))
    table.meta.timeline_writer().request("20300101000000000", "compaction", b"")
    with pytest.raises(UnsupportedTableError, match="compaction 20300101000000000 .*rollback_to_instant"):
        check_adoptable(table.meta)


@pytest.mark.parametrize("version", [6, 9])
def test_a_copy_on_write_table_a_writer_is_writing_is_refused(tmp_path, version: int) -> None:
    table = _table(str(tmp_path / "t"), "COPY_ON_WRITE", version)
    table.meta.timeline_writer().request("20300101000000000", "commit")
    with pytest.raises(UnsupportedTableError, match="copy-on-write and a Hudi writer is writing it"):
        check_adoptable(table.meta)
    merge_on_read = _table(str(tmp_path / "mor"), version=version)
    merge_on_read.meta.timeline_writer().request("20300101000000000", "deltacommit")
    check_adoptable(merge_on_read.meta)  # a dead writer's deltacommit: memtier rolls it back
