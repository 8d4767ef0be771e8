"""Key filters of log files (memtier.hudi.logfilters): a commit writes the filters of each
data block of its log files, a key read decodes only the blocks (and so the log files)
that may hold its keys, and a filter file that does not match the log file (another size,
other blocks, a commit that did not complete, an unreadable file) is ignored, never
trusted: the reads stay exact."""

from __future__ import annotations

import json
from pathlib import Path
from unittest.mock import patch

import pyarrow as pa
import pytest

import memtier.hudi.slicereader as slicereader
from memtier.hudi import HudiTable
from memtier.hudi.cache import SliceCache
from memtier.hudi.logfilters import log_filters
from memtier.hudi.reader import read_table
from memtier.hudi.timeline import Timeline

SCHEMA = pa.schema([("k", pa.int64()), ("o", pa.int64()), ("part", pa.string())])
PARTS = ("a", "b", "c")


def rows(keys: range, o: int) -> pa.Table:
    return pa.table({"k": list(keys), "o": [o] * len(keys), "part": [PARTS[k % 3] for k in keys]}, schema=SCHEMA)


@pytest.fixture
def table(tmp_path: Path) -> HudiTable:
    """Keys 0-59 in base files, then 0-29 updated into one log file per partition's bucket."""
    t = HudiTable.create(str(tmp_path / "t"), SCHEMA, record_key="k", ordering_field="o",
                         partition_fields="part", buckets=1)
    t.write(rows(range(60), 1))
    t.write(rows(range(30), 2))
    return t


def filter_files(table: HudiTable) -> list[Path]:
    return sorted((Path(table.meta.base_path) / ".hoodie" / ".aux" / "memtier" / "keyfilters").glob("*.json"))


def lookup(table: HudiTable, cache: SliceCache, key: int) -> tuple[list[dict], int]:
    """The rows of ``key`` and how many log blocks the read decoded."""
    decoded = []
    real = slicereader._decoded

    def counted(meta, block, columns):  # noqa: ANN001, ANN202
        decoded.append(block.offset)
        return real(meta, block, columns)

    with patch.object(slicereader, "_decoded", counted):
        found = read_table(table.meta, filters=[("k", "=", key)], cache=cache)
    return found.to_pylist(), len(decoded)


def test_a_key_read_decodes_only_the_log_files_that_may_hold_the_key(table: HudiTable) -> None:
    [written] = filter_files(table)  # the log files' commit; the base files carry their own
    assert sorted(json.loads(written.read_text())["files"]) == sorted(
        f"part={p}/{f.name}" for p in PARTS for s in table.file_slices() if s.partition_path == f"part={p}"
        for f in s.log_files)
    cache = SliceCache()
    assert lookup(table, cache, 4) == ([{"k": 4, "o": 2, "part": "b"}], 1)  # of three log files
    assert lookup(table, cache, 45) == ([{"k": 45, "o": 1, "part": "a"}], 0)  # in no log file


def test_a_key_read_decodes_only_the_blocks_of_a_log_file_that_may_hold_the_key(tmp_path: Path) -> None:
    with patch("memtier.hudi.filegroup.LOG_BLOCK_ROWS", 4):
        t = HudiTable.create(str(tmp_path / "t"), SCHEMA, record_key="k", ordering_field="o",
                             partition_fields="part", buckets=1)
        t.write(rows(range(60), 1))
        t.write(rows(range(30), 2))  # 10 rows a partition: three blocks in each log file
    [written] = filter_files(t)
    assert {len(entry["blocks"]) for entry in json.loads(written.read_text())["files"].values()} == {3}
    cache = SliceCache()
    for key in range(30):
        assert lookup(t, cache, key)[0] == [{"k": key, "o": 2, "part": PARTS[key % 3]}]
    assert lookup(t, SliceCache(), 4) == ([{"k": 4, "o": 2, "part": "b"}], 1)  # one block of three
    assert lookup(t, SliceCache(), 45) == ([{"k": 45, "o": 1, "part": "a"}], 0)
    content = json.loads(written.read_text())
    for entry in content["files"].values():
        entry["blocks"] = entry["blocks"][:2]  # filters of other blocks than the file holds
    written.write_text(json.dumps(content))
    assert lookup(t, SliceCache(), 4) == ([{"k": 4, "o": 2, "part": "b"}], 3)  # every block of its file


def test_a_filter_of_another_size_is_not_trusted(table: HudiTable) -> None:
    [written] = filter_files(table)
    content = json.loads(written.read_text())
    for entry in content["files"].values():
        entry["size"] += 1  # as if another writer had appended blocks since
        entry["blocks"] = [{name: _empty_filter(value) for name, value in block.items()} for block in entry["blocks"]]
    written.write_text(json.dumps(content))
    assert lookup(table, SliceCache(), 4) == ([{"k": 4, "o": 2, "part": "b"}], 3)


def test_an_unreadable_filter_file_is_ignored(table: HudiTable) -> None:
    [written] = filter_files(table)
    written.write_text("{not json")
    assert lookup(table, SliceCache(), 4) == ([{"k": 4, "o": 2, "part": "b"}], 3)


def test_only_completed_commits_filters_are_read(table: HudiTable) -> None:
    timeline = table.meta.timeline()
    assert log_filters(table.meta, timeline, SliceCache())
    first_only = Timeline(timeline.layout_version, timeline.instants[:1])  # the log files' commit not completed
    assert log_filters(table.meta, first_only, SliceCache()) == {}


def test_log_files_with_deletes_get_no_filter(tmp_path: Path) -> None:
    t = HudiTable.create(str(tmp_path / "t"), SCHEMA, record_key="k", ordering_field="o",
                         partition_fields="part", buckets=1)
    t.write(rows(range(9), 1))
    t.write(rows(range(3), 0), operation="delete")
    assert filter_files(t) == []
    assert lookup(t, SliceCache(), 1)[0] == []


def test_writers_keep_the_newest_filter_files(table: HudiTable) -> None:
    with patch("memtier.hudi.logfilters.KEEP", 2):
        for o in range(3, 6):
            table.write(rows(range(30), o))
    kept = filter_files(table)
    assert len(kept) == 2
    assert [p.stem for p in kept] == [i.timestamp for i in table.meta.timeline().completed()][-2:]
    assert lookup(table, SliceCache(), 7)[0] == [{"k": 7, "o": 5, "part": "b"}]


def _empty_filter(entry: str) -> str:
    """``entry`` with every bit cleared: it holds no key at all."""
    import base64

    raw = bytearray(base64.b64decode(entry))
    raw[10:] = bytes(len(raw) - 10)
    return base64.b64encode(bytes(raw)).decode()
