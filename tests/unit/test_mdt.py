"""Hudi's metadata table dropped when memtier writes a table, as Hudi drops it when a
writer disables it: the folder deleted, the partitions emptied in hoodie.properties."""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from memtier.hudi import HudiTable
from memtier.hudi.mdt import drop_metadata_table, has_metadata_table, metadata_table_path
from memtier.hudi.properties import (
    METADATA_PARTITIONS,
    METADATA_PARTITIONS_INFLIGHT,
    load_table_config,
    rewrite_table_config,
)
from memtier.io import join

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64())])


def _with_metadata_table(path: str, version: int) -> HudiTable:
    table = HudiTable.create(path, SCHEMA, record_key="id", ordering_field="ts", buckets=1, table_version=version)
    mdt = metadata_table_path(path)
    table.io.write_atomic(join(mdt, ".hoodie", "hoodie.properties"), b"hoodie.table.name=t_metadata\n")
    table.io.write_atomic(join(mdt, "files", ".files-0000-0_00000000000000000.log.1_0-0-0"), b"#HUDI#")
    raw = {**table.config.raw, METADATA_PARTITIONS: "files,column_stats", METADATA_PARTITIONS_INFLIGHT: "record_index"}
    rewrite_table_config(table.io, path, dataclasses.replace(table.config, raw=raw))
    return HudiTable.open(path)


def test_a_write_drops_the_metadata_table_as_hudi_does(tmp_path) -> None:
    for version in (6, 9):
        path = str(tmp_path / f"v{version}")
        table = _with_metadata_table(path, version)
        assert has_metadata_table(table.meta)
        table.write(pa.table({"id": [1], "ts": [1]}, schema=SCHEMA))
        config = load_table_config(table.io, path)
        assert not table.io.exists(metadata_table_path(path))
        assert (config.raw[METADATA_PARTITIONS], config.raw[METADATA_PARTITIONS_INFLIGHT]) == ("", "")
        assert config.version == version and not has_metadata_table(table.meta)
        assert table.read().to_pylist() == [{"id": 1, "ts": 1}]


def test_a_table_without_one_is_left_as_it_is(tmp_path) -> None:
    table = HudiTable.create(str(tmp_path / "t"), SCHEMA, record_key="id", ordering_field="ts", buckets=1)
    before = table.io.read_bytes(join(table.path, ".hoodie", "hoodie.properties"))
    assert drop_metadata_table(table.meta) is table.meta
    assert table.io.read_bytes(join(table.path, ".hoodie", "hoodie.properties")) == before
