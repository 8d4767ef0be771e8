"""Reads of a few record keys touch only the row groups and rows that hold them, and
return exactly what a read of the whole file slices filtered on the keys returns:
keys on row-group boundaries, keys only in logs, deleted keys, absent keys, keys given
without their partition (each partition's file asked by its key filter first),
composite and string keys; files written without key filters read alike."""

from __future__ import annotations

import time
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pytest

from memtier.hudi import HudiTable
from memtier.hudi.cache import SliceCache
from memtier.hudi.reader import read_table
from tests.support.hudirs import rows

GROUP_ROWS = 100


@pytest.fixture(autouse=True)
def small_row_groups():
    with patch("memtier.hudi.parquetfile.ROW_GROUP_ROWS", GROUP_ROWS):
        yield


def both(table: HudiTable, filters: list, cache: SliceCache) -> tuple[list, list]:
    """(the key read through ``cache``, the whole slices read and then filtered)."""
    pruned = rows(read_table(table.meta, filters=filters, cache=cache))
    whole = rows(read_table(table.meta, filters=filters))
    return pruned, whole


def int_table(path: Path, keys: int = 1000, partitioned: bool = False) -> HudiTable:
    schema = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.float64())])
    table = HudiTable.create(str(path), schema, record_key="id", ordering_field="ts",
                             partition_fields="city" if partitioned else None, buckets=2)
    ids = np.arange(keys)
    table.write(pa.table({"id": ids, "ts": np.ones(keys, np.int64), "city": np.array(["ams", "ber", "lis"])[ids % 3],
                          "v": ids * 1.5}, schema=schema))
    return table


def key_groups(cache: SliceCache) -> set:
    """(file, row group) pairs whose key columns a read decoded."""
    return {(k[1], k[2]) for k in cache._entries if k[0] == "keys"}


def test_one_key_decodes_one_row_group_and_finds_keys_on_every_boundary(tmp_path: Path) -> None:
    table = int_table(tmp_path / "t")
    cache = SliceCache()
    pruned, whole = both(table, [("id", "=", 550)], cache)
    assert pruned == whole and len(pruned) == 1
    assert len(key_groups(cache)) == 1  # a base file of ~5 row groups: only one opened
    for k in [0, 1, 98, 99, 100, 101, 198, 199, 200, 998, 999, -1, 1000, 10**12]:
        pruned, whole = both(table, [("id", "=", k)], cache)
        assert pruned == whole and len(pruned) == (1 if 0 <= k < 1000 else 0), k
    pruned, whole = both(table, [("id", "in", [0, 199, 200, 999, 5000])], cache)
    assert pruned == whole and len(pruned) == 4


def test_keys_in_logs_deleted_and_reinserted(tmp_path: Path) -> None:
    table = int_table(tmp_path / "t", partitioned=True)
    schema = table.schema
    table.write(pa.table({"id": [100, 2000, 2001], "ts": [5, 5, 5], "city": ["ber", "ams", "ber"],
                          "v": [0.0, 1.0, 2.0]}, schema=schema))           # an update, two keys only in logs
    table.write(pa.table({"id": [101, 2001], "city": ["lis", "ber"]}), operation="delete")
    table.write(pa.table({"id": [101], "ts": [9], "city": ["lis"], "v": [7.0]}, schema=schema))  # re-inserted
    table.write(pa.table({"id": [102], "ts": [0], "city": ["ams"], "v": [9.0]}, schema=schema))  # loses to ts 1
    cache = SliceCache()
    for k in [100, 101, 102, 2000, 2001, 99, 3000]:
        pruned, whole = both(table, [("id", "=", k)], cache)  # the key alone: every partition asked
        assert pruned == whole, k
    pruned, whole = both(table, [("id", "in", [100, 101, 102, 2000, 2001, 5])], cache)
    assert pruned == whole
    assert {r[0] for r in pruned} == {5, 100, 101, 102, 2000}
    assert [r for r in pruned if r[0] == 102][0][3] == 102 * 1.5


def test_composite_and_string_keys(tmp_path: Path) -> None:
    schema = pa.schema([("tenant", pa.string()), ("id", pa.int32()), ("ts", pa.int64()), ("v", pa.string())])
    table = HudiTable.create(str(tmp_path / "c"), schema, record_key=["tenant", "id"], ordering_field="ts",
                             partition_fields="tenant", buckets=3)
    n = 900
    table.write(pa.table({"tenant": [f"t{i % 4}" for i in range(n)], "id": list(range(n)),
                          "ts": [1] * n, "v": [f"x{i}" for i in range(n)]}, schema=schema))
    table.write(pa.table({"tenant": ["t1", "t9"], "id": [1, 1], "ts": [2, 2], "v": ["new", "log"]}, schema=schema))
    table.write(pa.table({"tenant": ["t2"], "id": [2]}), operation="delete")
    cache = SliceCache()
    cases = [
        [("tenant", "=", "t1"), ("id", "=", 1)],
        [("tenant", "in", ["t1", "t2", "t9"]), ("id", "in", [1, 2, 5, 899])],
        [("id", "=", 2)],
        [("tenant", "=", "t3"), ("id", "in", [3, 7, 11, 15, 99999])],
        [("tenant", "=", "nobody"), ("id", "=", 3)],
    ]
    for filters in cases:
        pruned, whole = both(table, filters, cache)
        assert pruned == whole, filters

    keyed = HudiTable.create(str(tmp_path / "s"), pa.schema([("k", pa.string()), ("ts", pa.int64())]),
                             record_key="k", ordering_field="ts", buckets=1)
    keys = [f"key-{i:05d}" for i in np.random.default_rng(3).permutation(700)]  # unsorted strings
    keyed.write(pa.table({"k": keys, "ts": [1] * len(keys)}))
    for filters in [[("k", "=", "key-00350")], [("k", "in", ["key-00000", "key-00699", "nope"])],
                    [("_hoodie_record_key", "=", "key-00123")]]:
        pruned, whole = both(keyed, filters, cache)
        assert pruned == whole and pruned, filters


def test_log_files_decoded_once_and_new_commits_still_seen(tmp_path: Path) -> None:
    table = int_table(tmp_path / "t", keys=300)
    cache = SliceCache()
    table.write(pa.table({"id": [7], "ts": [3], "city": ["x"], "v": [1.0]}, schema=table.schema))
    assert both(table, [("id", "=", 7)], cache)[0][0][3] == 1.0
    logs = {k for k in cache._entries if k[0] == "log block"}
    assert logs
    table.write(pa.table({"id": [7], "ts": [4], "city": ["x"], "v": [2.0]}, schema=table.schema))
    assert both(table, [("id", "=", 7)], cache)[0][0][3] == 2.0
    assert logs <= {k for k in cache._entries if k[0] == "log block"}  # the first log file was not decoded again
    assert {k[1:3] for k in cache._entries if k[0] == "log keys"} == {k[1:3] for k in cache._entries if k[0] == "log block"}
    table.write(pa.table({"id": [250, 3, 120, 7], "ts": [5, 5, 5, 5], "city": ["y"] * 4, "v": [3.0, 4.0, 5.0, 6.0]},
                         schema=table.schema))  # a log block out of key order: found through its index
    for k, v in [(250, 3.0), (3, 4.0), (120, 5.0), (7, 6.0), (8, 12.0)]:
        pruned, whole = both(table, [("id", "=", k)], cache)
        assert pruned == whole and pruned[0][3] == v, k


def test_a_key_given_alone_opens_only_its_partitions_file_and_footers_are_read_ahead(tmp_path: Path) -> None:
    table = int_table(tmp_path / "t", keys=3000, partitioned=True)  # city = id % 3: every file spans every id
    cache = SliceCache()
    pruned, whole = both(table, [("id", "=", 1234)], cache)
    assert pruned == whole and len(pruned) == 1
    opened = {path.split("/")[-2] for path, _ in key_groups(cache)}
    assert opened == {"city=ber"}  # 1234 % 3 == 1; the other partitions' key filters said no
    footers = {p for p in (slice_.base_file_path(table.path) for slice_ in table.file_slices()) if p}
    for _ in range(200):  # the view's first read warmed every base file's footer in the background
        if all(("footer", p) in cache._entries for p in footers):
            break
        time.sleep(0.01)
    assert all(("footer", p) in cache._entries for p in footers)


def test_files_written_without_key_filters_are_still_read(tmp_path: Path) -> None:
    table = int_table(tmp_path / "t", keys=300, partitioned=True)
    with patch("memtier.hudi.basefile.key_filter_metadata", return_value={}):  # as other writers' files
        table.write(pa.table({"id": [7, 4000], "ts": [2, 2], "city": ["osl", "osl"], "v": [0.5, 1.0]},
                             schema=table.schema))  # a new partition: new base files, no filters
    cache = SliceCache()
    for k in (7, 4000, 8, 10**9):
        pruned, whole = both(table, [("id", "=", k)], cache)
        assert pruned == whole and len(pruned) == {7: 2, 4000: 1, 8: 1}.get(k, 0), k
