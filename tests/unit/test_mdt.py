"""Hudi's metadata table of a table memtier writes: on version 8/9 its ``files`` partition
is kept current (each commit first a metadata deltacommit of the same instant time, an
HFile log block listing the files written or cleaned) and every other partition dropped
as Hudi drops one; on version 6 it is dropped whole, as Hudi drops it when disabled. A
metadata deltacommit whose data instant is rolled back is forgotten."""

from __future__ import annotations

import json
import time
from io import BytesIO

import fastavro
import pyarrow as pa

from memtier.hudi import HudiTable
from memtier.hudi.avro import with_meta_fields
from memtier.hudi.commit import CommitMetadata
from memtier.hudi.hfile import read_hfile
from memtier.hudi.logformat import BlockType, HeaderKey, iter_blocks
from memtier.hudi.mdt import drop_metadata_table, has_metadata_table, metadata_table_path
from memtier.hudi.mdtfiles import record_instant, record_schema
from memtier.hudi.properties import METADATA_PARTITIONS, METADATA_PARTITIONS_INFLIGHT, load_table_config
from memtier.hudi.timeline import Instant, State, Timeline, TimelineWriter, new_instant_time
from memtier.hudi.writer import rollback_pending
from memtier.io import join
from tests.support.metadata_table import add_metadata_table

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64())])


def _with_metadata_table(path: str, version: int) -> HudiTable:
    table = HudiTable.create(path, SCHEMA, record_key="id", ordering_field="ts", buckets=1, table_version=version)
    add_metadata_table(table.io, path, ("files", "column_stats"), ("record_index",))
    return HudiTable.open(path)


def _files_records(table: HudiTable, instant: str) -> dict[str, dict]:
    """The records of the metadata table's log block of ``instant``: key -> record."""
    name = f".files-0000-0_{instant}.log.1_0-0-0"
    path = join(metadata_table_path(table.path), "files", name)
    [block] = list(iter_blocks(table.io.read_bytes(path), path))
    assert block.block_type is BlockType.HFILE_DATA and block.instant_time == instant
    assert json.loads(block.header[HeaderKey.SCHEMA]) == record_schema()
    schema = fastavro.parse_schema(record_schema())
    cells, _ = read_hfile(bytes(block.content))
    return {key.decode(): fastavro.schemaless_reader(BytesIO(value), schema, schema) for key, value in cells}


def test_version_6_drops_the_metadata_table_as_hudi_does(tmp_path) -> None:
    path = str(tmp_path / "v6")
    table = _with_metadata_table(path, 6)
    assert has_metadata_table(table.meta)
    table.write(pa.table({"id": [1], "ts": [1]}, schema=SCHEMA))
    config = load_table_config(table.io, path)
    assert not table.io.exists(metadata_table_path(path))
    assert (config.raw[METADATA_PARTITIONS], config.raw[METADATA_PARTITIONS_INFLIGHT]) == ("", "")
    assert config.version == 6 and not has_metadata_table(table.meta)
    assert table.read().to_pylist() == [{"id": 1, "ts": 1}]


def test_version_9_keeps_files_current_and_drops_the_other_partitions(tmp_path) -> None:
    path = str(tmp_path / "v9")
    table = _with_metadata_table(path, 9)
    instant = table.write(pa.table({"id": [1, 2], "ts": [1, 1]}, schema=SCHEMA))
    assert instant is not None
    config = load_table_config(table.io, path)
    assert (config.raw[METADATA_PARTITIONS], config.raw[METADATA_PARTITIONS_INFLIGHT]) == ("files", "")
    mdt = metadata_table_path(path)
    assert not table.io.exists(join(mdt, "column_stats")) and table.io.exists(join(mdt, "files"))

    data_done = [i for i in table.timeline().completed() if i.timestamp == instant]
    mdt_done = [i for i in Timeline.load(table.io, mdt, 2).completed() if i.timestamp == instant]
    assert [i.action for i in mdt_done] == ["deltacommit"]
    assert mdt_done[0].completion_time <= data_done[0].completion_time  # the metadata table first
    written = {f.name: f.size for f in table.io.list_dir(path) if not f.is_dir and "hoodie_partition" not in f.name}
    records = _files_records(table, instant)
    assert records["__all_partitions__"]["type"] == 1
    assert list(records["__all_partitions__"]["filesystemMetadata"]) == ["."]
    listed = records["."]["filesystemMetadata"]
    assert records["."]["type"] == 2 and listed and all(not v["isDeleted"] for v in listed.values())
    assert {name: info["size"] for name, info in listed.items()} == written
    assert table.read().to_pylist() == [{"id": 1, "ts": 1}, {"id": 2, "ts": 1}]


def test_a_rolled_back_instant_is_forgotten_in_the_metadata_table(tmp_path) -> None:
    """A crash after the metadata deltacommit, before the data instant completed: the
    rollback of the data instant forgets the metadata deltacommit (log file and instant)."""
    path = str(tmp_path / "crash")
    table = _with_metadata_table(path, 9)
    table.write(pa.table({"id": [1], "ts": [1]}, schema=SCHEMA))  # trims; one complete commit
    meta = HudiTable.open(path).meta
    writer = meta.timeline_writer()
    requested = writer.request("20990101000000000", "deltacommit")
    inflight = writer.inflight(requested)
    done = [i for i in meta.timeline().completed() if i.action == "deltacommit"][0]
    content = meta.io.read_bytes(meta.timeline().instant_path(path, done))
    record_instant(meta.io, path, inflight, content)  # the metadata deltacommit, then the "crash"
    mdt = metadata_table_path(path)
    log_file = join(mdt, "files", ".files-0000-0_20990101000000000.log.1_0-0-0")
    assert meta.io.exists(log_file)
    assert "20990101000000000" in {i.timestamp for i in Timeline.load(meta.io, mdt, 2).completed()}

    rollback_pending(meta)
    assert not meta.io.exists(log_file)
    assert "20990101000000000" not in {i.timestamp for i in Timeline.load(meta.io, mdt, 2).instants}
    assert [i.state for i in meta.timeline().instants if i.timestamp == "20990101000000000"] == []
    assert State.COMPLETED in {i.state for i in meta.timeline().instants if i.action == "rollback"}


def test_a_table_without_one_is_left_as_it_is(tmp_path) -> None:
    table = HudiTable.create(str(tmp_path / "t"), SCHEMA, record_key="id", ordering_field="ts", buckets=1)
    before = table.io.read_bytes(join(table.path, ".hoodie", "hoodie.properties"))
    assert drop_metadata_table(table.meta) is table.meta
    assert table.io.read_bytes(join(table.path, ".hoodie", "hoodie.properties")) == before


def _block_schema(table: HudiTable, instant: str) -> dict:
    """The record schema the header of the metadata table's block of ``instant`` names."""
    path = join(metadata_table_path(table.path), "files", f".files-0000-0_{instant}.log.1_0-0-0")
    [block] = list(iter_blocks(table.io.read_bytes(path), path))
    return json.loads(block.header[HeaderKey.SCHEMA])


def test_blocks_follow_the_record_schema_another_writer_names(tmp_path) -> None:
    """The record schema is read again when another writer (Hudi of another release) has
    completed the newest deltacommit, and kept while memtier's own are the newest."""
    path = str(tmp_path / "schema")
    table = _with_metadata_table(path, 9)
    first = table.write(pa.table({"id": [1], "ts": [1]}, schema=SCHEMA))
    assert first is not None and _block_schema(table, first) == record_schema()
    mdt = metadata_table_path(path)
    theirs = json.loads(json.dumps(record_schema()))
    theirs["fields"] = [f for f in theirs["fields"] if not f["name"].startswith("_hoodie_")]
    theirs["fields"].append({"name": "addedByHudi", "type": ["null", "string"], "default": None})
    writer = TimelineWriter(table.io, mdt, 2)
    writer.complete(writer.start(new_instant_time(first), "deltacommit"),
                    CommitMetadata({}, {"schema": json.dumps(theirs)}, "UPSERT_PREPPED").encode(2))
    time.sleep(0.002)  # memtier's next instant time comes after it
    later = [table.write(pa.table({"id": [i], "ts": [i]}, schema=SCHEMA)) for i in (2, 3)]
    assert [_block_schema(table, t) for t in later if t] == [with_meta_fields(theirs)] * 2


def test_a_deltacommit_a_crash_left_pending_is_recorded_again(tmp_path) -> None:
    """What a crash of the machine before the sync of the requested and inflight files may
    leave (either of them, or both): a new attempt at the instant forgets it first."""
    path = str(tmp_path / "again")
    table = _with_metadata_table(path, 9)
    table.write(pa.table({"id": [1], "ts": [1]}, schema=SCHEMA))
    meta = HudiTable.open(path).meta
    done = meta.timeline().completed()[-1]
    content = meta.io.read_bytes(meta.timeline().instant_path(path, done))
    folder = join(metadata_table_path(path), ".hoodie", "timeline")
    for i, left in enumerate(("requested", "inflight")):
        timestamp = f"2099010100000000{i}"
        meta.io.write_atomic(join(folder, f"{timestamp}.deltacommit.{left}"), b"")
        record_instant(meta.io, path, Instant(timestamp, "deltacommit", State.INFLIGHT), content)
        mdt_timeline = Timeline.load(meta.io, metadata_table_path(path), 2)
        assert [i.state for i in mdt_timeline.instants if i.timestamp == timestamp] == [State.COMPLETED]
