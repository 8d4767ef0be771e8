"""Compaction of the ``files`` partition of Hudi's metadata table: the merge of its records
(``HoodieMetadataPayload``'s rules, pure logic), and a compaction of a table memtier
writes, as Hudi 1.x makes one (plan, base HFile, ``commit``), whose listing equals the
file system's before, after, and once more writes follow."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from memtier.hudi import HudiTable
from memtier.hudi.filenames import BaseFile
from memtier.hudi.mdt import metadata_table_path
from memtier.hudi.mdtcompact import (
    FilesRecord,
    combine,
    compact_files_partition,
    compaction_time,
    deltacommits_since_base,
    listing,
    merge,
    read_files_partition,
)
from memtier.hudi.mdtfiles import record_instant
from memtier.hudi.plans import CompactionPlan
from memtier.hudi.timeline import State, Timeline, new_instant_time, parse_instant_time
from memtier.hudi.writer import rollback_pending
from tests.support.hudi_spark import listed_files
from tests.support.metadata_table import add_metadata_table

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("part", pa.string())])


def files(**entries: tuple[int, bool]) -> FilesRecord:
    return FilesRecord(2, entries)


# == the merge ==========================================================================


def test_a_file_listed_again_keeps_the_larger_size() -> None:
    assert combine(files(a=(10, False)), files(a=(7, False), b=(3, False))).files == {"a": (10, False), "b": (3, False)}
    assert combine(files(a=(7, False)), files(a=(10, False))).files == {"a": (10, False)}


def test_a_deleted_file_leaves_the_listing_and_its_tombstone_only_stays_alone() -> None:
    assert combine(files(a=(10, False), b=(1, False)), files(a=(0, True))).files == {"b": (1, False)}
    assert combine(files(b=(1, False)), files(a=(0, True))).files == {"b": (1, False), "a": (0, True)}
    assert combine(files(a=(0, True)), files(a=(0, True))).files == {"a": (0, True)}
    assert combine(files(a=(0, True)), files(a=(5, False))).files == {"a": (5, False)}


def test_merge_applies_records_in_order_and_a_delete_drops_the_key() -> None:
    merged = merge([("p", files(a=(1, False))), ("p", files(a=(0, True), b=(2, False))), ("q", files(c=(3, False))),
                    ("q", None), ("q", files(d=(4, False)))])
    assert merged == {"p": files(b=(2, False)), "q": files(d=(4, False))}


def test_listing_takes_the_partitions_the_partition_list_names() -> None:
    merged = {
        "__all_partitions__": FilesRecord(1, {"p=1": (0, False), ".": (0, False), "p=2": (0, True)}),
        "p=1": files(a=(1, False), b=(0, True)),
        "p=2": files(c=(3, False)),  # a deleted partition
        ".": files(d=(4, False)),
    }
    assert listing(merged) == {"": {"d": 4}, "p=1": {"a": 1}}


# == compacting a table =================================================================


def _table(path: str) -> HudiTable:
    table = HudiTable.create(path, SCHEMA, record_key="id", ordering_field="ts", partition_fields="part", buckets=1,
                             table_version=9)
    add_metadata_table(table.io, path)
    return HudiTable.open(path)


def _write(table: HudiTable, i: int) -> str:
    return table.write(pa.table({"id": [i, i + 100], "ts": [i, i], "part": [f"p{i % 3}", "p9"]}, schema=SCHEMA))


def _listed(table: HudiTable) -> set[tuple[str, str, int]]:
    found = read_files_partition(table.io, table.path, table.timeline())
    return {(partition, name, size) for partition, names in found.items() for name, size in names.items()}


def _compact(table: HudiTable, max_delta_commits: int = 10) -> str | None:
    return compact_files_partition(table.io, table.path, table.timeline(), lambda after: new_instant_time(after),
                                   max_delta_commits)


def test_a_compaction_as_hudi_makes_one(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = _table(path)
    for i in range(9):
        _write(table, i)
    assert _compact(table) is None  # 9 deltacommits: not due
    _write(table, 9)
    mdt = metadata_table_path(path)
    mdt_timeline = Timeline.load(table.io, mdt, 2)
    assert deltacommits_since_base(mdt_timeline) == 10
    before = _listed(table)
    assert before == listed_files(path)

    instant = _compact(table)
    assert instant is not None and instant > table.timeline().last_timestamp()
    mdt_timeline = Timeline.load(table.io, mdt, 2)
    [done] = mdt_timeline.completed(("commit",))
    assert done.timestamp == instant and deltacommits_since_base(mdt_timeline) == 0
    assert [i.state for i in mdt_timeline.instants if i.timestamp == instant] == [State.COMPLETED]
    plan = CompactionPlan.from_avro(Path(mdt, ".hoodie", "timeline", f"{instant}.compaction.requested").read_bytes())
    [op] = plan.operations
    assert (op.partition_path, op.file_id, op.base_file) == ("files", "files-0000-0", None)
    assert len(op.log_files) == 10  # the stand-in's log file of no completed deltacommit is not one
    base = BaseFile("files-0000-0", "0-0-0", instant, "hfile").name
    assert Path(mdt, "files", base).exists()
    assert _listed(table) == before
    metadata = Timeline.load(table.io, mdt, 2).read_commit_metadata(table.io, mdt, done)
    assert metadata.compacted and metadata.operation_type == "COMPACT"
    assert [s.path for s in metadata.write_stats()] == [f"files/{base}"]

    _write(table, 10)  # its log file joins the slice the compaction opened
    assert _listed(table) == listed_files(path) != before
    assert _compact(table) is None


def test_a_data_instant_pending_after_its_metadata_deltacommit_stays_out(tmp_path: Path) -> None:
    """As Hudi: the compaction's time is 1 ms before a data instant whose metadata
    deltacommit completed while it is still pending, so that instant can be rolled back."""
    path = str(tmp_path / "t")
    table = _table(path)
    for i in range(10):
        _write(table, i)
    before = _listed(table)
    meta = HudiTable.open(path).meta
    mdt_timeline = Timeline.load(meta.io, metadata_table_path(path), 2)
    stuck = new_instant_time(new_instant_time(max(i.completion_time or "" for i in mdt_timeline.instants)))
    writer = meta.timeline_writer()
    inflight = writer.inflight(writer.request(stuck, "deltacommit"))
    done = meta.timeline().completed(("deltacommit",))[-1]
    record_instant(meta.io, path, inflight, meta.io.read_bytes(meta.timeline().instant_path(path, done)))
    one_ms_before = new_instant_time(None, lambda: parse_instant_time(stuck) - timedelta(milliseconds=1))
    assert compaction_time(Timeline.load(meta.io, metadata_table_path(path), 2), meta.timeline(),
                           lambda after: "29990101000000000") == one_ms_before
    instant = _compact(table)
    assert instant == one_ms_before
    assert _listed(table) == before
    rollback_pending(meta)
    assert _listed(table) == before == listed_files(path)


def test_bad_settings_are_refused() -> None:
    from memtier.config import ServicesConfig, load
    from memtier.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="metadata-compact-max-delta-commits"):
        load(ServicesConfig, {"services.metadata-compact-max-delta-commits": "0"})
