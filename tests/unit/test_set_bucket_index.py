"""HudiTable.set_bucket_index: a table whose hoodie.properties does not record the bucket
index its writer used (as Apache Hudi's do not) learns it, and then takes writes."""

from __future__ import annotations

import pyarrow as pa
import pytest

from memtier.errors import InvalidArgumentError, UnsupportedTableError
from memtier.hudi import HudiTable
from memtier.hudi.properties import (
    BUCKET_HASH_FIELD,
    BUCKETS,
    INDEX_TYPE,
    format_properties,
    parse_properties,
    properties_path,
)
from tests.support.hudirs import hudi_rs_read, rows

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("p", pa.string())])


def _without_bucket_index(path: str, buckets: int, **extra: str) -> HudiTable:
    """A memtier table of ``buckets`` buckets, written once, with the index keys removed
    from hoodie.properties (what a table Hudi's Spark writer made looks like)."""
    table = HudiTable.create(path, SCHEMA, record_key="id", ordering_field="ts", partition_fields="p",
                             buckets=buckets)
    table.write(pa.table({"id": [1, 2, 3, 4], "ts": [1] * 4, "p": ["a", "a", "b", "b"]}, schema=SCHEMA))
    props_path = properties_path(path)
    props = parse_properties(table.io.read_bytes(props_path).decode())
    for key in (INDEX_TYPE, BUCKETS, BUCKET_HASH_FIELD):
        del props[key]
    props.update(extra)
    table.io.write_atomic(props_path, format_properties(props).encode())
    return HudiTable.open(path)


def test_a_table_learns_its_bucket_index_and_takes_writes(tmp_path) -> None:
    table = _without_bucket_index(str(tmp_path / "t"), buckets=4)
    assert table.config.buckets is None
    with pytest.raises(UnsupportedTableError, match="no bucket index"):
        table.write(pa.table({"id": [5], "ts": [1], "p": ["a"]}, schema=SCHEMA))
    table.set_bucket_index(4)
    assert table.config.buckets == 4 and HudiTable.open(table.path).config.buckets == 4
    table.set_bucket_index(4)  # the same count again: nothing to do
    table.write(pa.table({"id": [1, 5], "ts": [2, 1], "p": ["a", "a"]}, schema=SCHEMA))
    expected = [(1, 2, "a"), (2, 1, "a"), (3, 1, "b"), (4, 1, "b"), (5, 1, "a")]
    assert rows(table.read(), SCHEMA.names) == expected
    assert rows(hudi_rs_read(table.path), SCHEMA.names) == expected


def test_a_count_the_files_do_not_fit_is_refused_and_nothing_changes(tmp_path) -> None:
    table = _without_bucket_index(str(tmp_path / "t"), buckets=4)
    before = table.io.read_bytes(properties_path(table.path))
    with pytest.raises(UnsupportedTableError, match="is not one of 2 buckets"):
        table.set_bucket_index(2)
    with pytest.raises(InvalidArgumentError, match="positive int"):
        table.set_bucket_index(0)
    assert table.io.read_bytes(properties_path(table.path)) == before
    table.set_bucket_index(4)
    with pytest.raises(UnsupportedTableError, match="records a bucket index of 4 buckets, not 8"):
        table.set_bucket_index(8)


def test_hudis_metadata_table_is_dropped_as_hudi_drops_it(tmp_path) -> None:
    """Hudi's readers list files from its metadata table, which memtier does not update:
    taking the table over empties its partitions, as a Hudi writer with it disabled does."""
    table = _without_bucket_index(str(tmp_path / "t"), buckets=4, **{"hoodie.table.metadata.partitions": "files"})
    table.set_bucket_index(4)
    config = HudiTable.open(table.path).config
    assert config.buckets == 4 and config.raw["hoodie.table.metadata.partitions"] == ""


def test_convert_records_a_count_the_files_do_not_fit_yet(tmp_path) -> None:
    table = _without_bucket_index(str(tmp_path / "t"), buckets=4)
    table.set_bucket_index(2, convert=True)
    assert HudiTable.open(table.path).config.buckets == 2
