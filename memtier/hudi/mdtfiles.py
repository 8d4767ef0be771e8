"""Keeping the ``files`` partition of Hudi's metadata table current with memtier's commits.

Hudi 1.x readers list a table's files through its metadata table (``.hoodie/metadata``),
not the file system. For every data instant memtier completes on a table that keeps its
metadata table, :func:`record_instant` first writes, as Hudi does, a metadata-table
deltacommit of the same instant time: one log file in the ``files`` partition's file group
(``.files-0000-0_<t>.log.1_0-0-0``) holding one HFILE_DATA block (:mod:`memtier.hudi.hfile`)
of ``HoodieMetadataRecord``s: ``__all_partitions__`` (type 1) naming the partitions the
instant touched, and per partition (type 2) the files it wrote with their sizes, or, for a
clean, the files it deleted (``isDeleted``); then the data instant completes.

Hudi reads a metadata-table log block only if its instant is valid: completed on the data
timeline, or a completed metadata deltacommit whose data instant is not pending
(``HoodieTableMetadataUtil.getValidInstantTimestamps``). So a crash between the two
completions leaves readers correct: the data instant is pending, its metadata block
ignored. memtier then rolls the data instant back; completing that rollback here
forgets the metadata instant of the rolled-back one (its log files deleted first, then its
instant files), so none of its files is ever listed. A metadata instant left pending by a
crash is forgotten the same way before its time is written again.

Only table versions 8 and 9 (timeline layout 2, log files named by their deltacommit).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from io import BytesIO
from typing import Any

import fastavro

from memtier.hudi.avro import with_meta_fields
from memtier.hudi.commit import CommitMetadata, RollbackMetadata, WriteStat
from memtier.hudi.hfile import write_hfile
from memtier.hudi.logformat import hfile_data_block
from memtier.hudi.plans import CleanMetadata
from memtier.hudi.properties import METADATA_PARTITIONS, METADATA_PARTITIONS_INFLIGHT, TableConfig
from memtier.hudi.timeline import Instant, State, Timeline, TimelineWriter, timeline_dir
from memtier.io import FileIO, basename, join

__all__ = [
    "FILES",
    "FilesChange",
    "files_change",
    "files_file_group",
    "keeps_files_partition",
    "metadata_table_path",
    "names_files_partition",
    "record_instant",
]

log = logging.getLogger(__name__)

FILES = "files"
ALL_PARTITIONS = "__all_partitions__"
NON_PARTITIONED = "."  # the key of a non-partitioned table's one partition
PARTITION_LIST, FILE_LIST = 1, 2  # HoodieMetadataRecord.type
METADATA_LAYOUT = 2
WRITE_TOKEN = "0-0-0"
FILE_ID = "files-0000-0"  # Hudi 1.x: the files partition's one file group


def metadata_table_path(base_path: str) -> str:
    return join(base_path, ".hoodie", "metadata")


@cache
def record_schema() -> dict[str, Any]:
    """``HoodieMetadataRecord`` with Hudi's meta fields as Hudi 1.0.2 writes it in block
    headers: the schema of a metadata table none of whose commits names one."""
    text = resources.files("memtier.hudi").joinpath("metadata_record.avsc").read_text()
    return json.loads(text)


#: Per metadata table path: the file name of its newest completed deltacommit when last
#: looked at, and the record schema (without meta fields, as commits name it; "" for none)
#: its newest completed deltacommits name.
_named_schemas: dict[str, tuple[str, str]] = {}


def table_record_schema(io: FileIO, mdt: str, timeline: Timeline) -> dict[str, Any]:
    """The ``HoodieMetadataRecord`` schema (with meta fields) the newest deltacommit of the
    metadata table at ``mdt`` (``timeline``) names: the one of the Hudi release that wrote
    it (Hudi 1.1 added fields to column stats; hudi-rs refuses a block whose schema
    differs from the table's).

    Read from the commit files only when the newest completed deltacommit is not the one
    it was last read from or recorded at (:func:`record_instant`): a completed instant's
    file never changes and its name (both times) is never reused, so another writer's
    deltacommit (Hudi's, of another release), or one rolled back or restored away, shows
    as another newest name. Archiving drops only the oldest instants, never the newest."""
    done = timeline.completed(("deltacommit",))
    if not done:
        return record_schema()
    newest = done[-1].file_name(METADATA_LAYOUT)
    known = _named_schemas.get(mdt)
    if known is None or known[0] != newest:
        named = next((text for text in (timeline.read_commit_metadata(io, mdt, i).schema for i in reversed(done))
                      if text), "")
        known = _named_schemas[mdt] = (newest, named)
    return _with_meta_fields(known[1]) if known[1] else record_schema()


@lru_cache(maxsize=8)
def _with_meta_fields(text: str) -> dict[str, Any]:
    """The record schema a commit names (``text``) with Hudi's meta fields; one shared
    value per text (not to be changed)."""
    return with_meta_fields(json.loads(text))


def schema_metadata(schema: dict[str, Any]) -> dict[str, str]:
    """The ``extraMetadata`` of a metadata-table commit written with record ``schema``:
    that schema without Hudi's meta fields."""
    without_meta = {**schema, "fields": [f for f in schema["fields"] if not f["name"].startswith("_hoodie_")]}
    return {"schema": json.dumps(without_meta, separators=(",", ":"))}


@lru_cache(maxsize=8)
def _parsed_schema(text: str) -> Any:
    return fastavro.parse_schema(json.loads(text))


def _listed(config: TableConfig, key: str) -> list[str]:
    return [p.strip() for p in config.raw.get(key, "").split(",") if p.strip()]


def files_file_group(io: FileIO, base_path: str) -> str | None:
    """The file id of the ``files`` partition's file group (``files-0000-0``), if it has one."""
    folder = join(metadata_table_path(base_path), FILES)
    if not io.exists(folder):
        return None
    ids = {entry.name.lstrip(".").split("_", 1)[0] for entry in io.list_dir(folder)
           if entry.name.lstrip(".").startswith("files-") and "_" in entry.name}
    return min(ids) if len(ids) == 1 else None


def names_files_partition(config: TableConfig) -> bool:
    """Whether the properties of a table of version 8 or 9 name the ``files`` partition
    of its metadata table complete (then memtier records its commits there)."""
    return (config.version >= 8 and config.timeline_layout_version == METADATA_LAYOUT
            and FILES in _listed(config, METADATA_PARTITIONS)
            and FILES not in _listed(config, METADATA_PARTITIONS_INFLIGHT))


def keeps_files_partition(io: FileIO, base_path: str, config: TableConfig) -> bool:
    """Whether memtier can keep this table's metadata table (its ``files`` partition): its
    properties name it complete (:func:`names_files_partition`) and it has Hudi 1.x's one
    file group ``files-0000-0``."""
    return names_files_partition(config) and files_file_group(io, base_path) == FILE_ID


@dataclass(frozen=True)
class FilesChange:
    """What one data instant changes in the ``files`` partition: per partition path, file
    name -> size (written) or None (deleted)."""

    files: Mapping[str, Mapping[str, int | None]]

    def records(self, schema: dict[str, Any]) -> list[tuple[bytes, bytes]]:
        """The HFile cells (key, Avro value of ``schema`` without its key field, as Hudi
        stores them)."""
        keys = {partition: partition or NON_PARTITIONED for partition in self.files}
        cells = [(ALL_PARTITIONS, PARTITION_LIST, {keys[p]: (0, False) for p in self.files})]
        cells += [(keys[p], FILE_LIST, {name: (size or 0, size is None) for name, size in names.items()})
                  for p, names in self.files.items()]
        parsed = _parsed_schema(json.dumps(schema, separators=(",", ":")))
        return [(key.encode(), _value(parsed, kind, listing)) for key, kind, listing in cells]


def _value(schema: Any, kind: int, listing: Mapping[str, tuple[int, bool]]) -> bytes:
    record = {"key": "", "type": kind,
              "filesystemMetadata": {name: {"size": size, "isDeleted": deleted}
                                     for name, (size, deleted) in sorted(listing.items())}}
    buffer = BytesIO()
    fastavro.schemaless_writer(buffer, schema, record)
    return buffer.getvalue()


def files_change(action: str, content: bytes) -> FilesChange | None:
    """The ``files`` change of a data instant completing as ``action`` with ``content``;
    None for an action that changes no file listing."""
    if action in ("commit", "deltacommit", "replacecommit"):
        metadata = CommitMetadata.decode(content)
        written: dict[str, dict[str, int | None]] = {}
        for stat in metadata.write_stats():
            if stat.path:
                written.setdefault(stat.partition_path, {})[basename(stat.path)] = stat.file_size
        return FilesChange(written)
    if action == "clean":
        cleaned = CleanMetadata.from_avro(content)
        return FilesChange({p: dict.fromkeys(names) for p, names in cleaned.deleted.items() if names})
    return None


def _forget(io: FileIO, base_path: str, timestamp: str) -> None:
    """Undo the metadata-table deltacommit ``timestamp`` (any state): its log files first
    (then no reader sees anything of it), then its instant files, each folder synced after
    its deletions: the rollback that completes after this never outlives them in a crash
    of the machine."""
    mdt = metadata_table_path(base_path)
    folder = join(mdt, FILES)
    logs = [entry for entry in (io.list_dir(folder) if io.exists(folder) else [])
            if entry.name.startswith(".files-") and entry.name.split("_", 2)[1].split(".", 1)[0] == timestamp]
    timeline = timeline_dir(mdt, METADATA_LAYOUT)
    names = sorted((e for e in io.list_dir(timeline) if e.name.startswith((f"{timestamp}.", f"{timestamp}_"))),
                   key=lambda e: ("_" not in e.name, e.name.endswith(".requested")))  # completed first, requested last
    for files, where in ((logs, folder), (names, timeline)):
        for entry in files:
            io.delete(entry.path)
        if files:
            io.sync_dir(where)
    if names:
        log.info("forgot metadata-table deltacommit %s of %s", timestamp, base_path)


def _has_instant(io: FileIO, base_path: str, timestamp: str) -> bool:
    """Whether the metadata table has any file of deltacommit ``timestamp``: then its
    requested or its inflight file is there (:func:`record_instant` makes both durable
    before it writes any other; :func:`_forget` deletes them last)."""
    folder = timeline_dir(metadata_table_path(base_path), METADATA_LAYOUT)
    pending = Instant(timestamp, "deltacommit", State.REQUESTED)
    return any(io.exists(join(folder, i.file_name(METADATA_LAYOUT)))
               for i in (pending, pending.with_state(State.INFLIGHT)))


def record_instant(io: FileIO, base_path: str, instant: Instant, content: bytes) -> None:
    """Bring the metadata table up to the data ``instant`` about to complete with
    ``content``: a deltacommit of its file changes (a rollback: the rolled-back instant's
    deltacommit forgotten). Runs before the data instant's completed file is written.

    The deltacommit's files, in order, and what a crash (of the process or the machine)
    leaves after each, the data instant being pending throughout:

    1. requested and inflight, empty, neither synced, then the timeline folder synced once
       (:meth:`TimelineWriter.start`): a crash before the sync returns may lose either or
       both; after it, a pending deltacommit. Readers ignore it (they read only
       completed ones); the data instant's rollback deletes whatever of it is there
       (:func:`_forget`, by listing), and so does an attempt to record it again
       (:func:`_has_instant` finds the requested or the inflight file);
    2. the HFile log block, synced with its folder (not before step 1 is durable, so it
       never outlives a crash without them): an uncommitted block, ignored, then deleted
       the same way;
    3. the completed deltacommit, synced with its folder, only after the log file is
       durable: from then on the deltacommit names a block that is there. Readers still
       ignore it while the data instant is pending (see the module's docstring).

    Only then does the caller write the data instant's completed file: it is never durable
    before the deltacommit it depends on.
    """
    action = instant.completes_as
    if action == "rollback":
        _forget(io, base_path, RollbackMetadata.from_avro(content).target_timestamp)
        return
    change = files_change(action, content)
    if change is None or not change.files:
        return
    if _has_instant(io, base_path, instant.timestamp):  # a crashed earlier attempt of this instant
        _forget(io, base_path, instant.timestamp)
    mdt = metadata_table_path(base_path)
    writer = TimelineWriter(io, mdt, METADATA_LAYOUT)
    inflight = writer.start(instant.timestamp, "deltacommit")
    timeline = Timeline.load(io, mdt, METADATA_LAYOUT)
    schema = table_record_schema(io, mdt, timeline)
    cells = change.records(schema)
    block = hfile_data_block(write_hfile(cells, {"schema": json.dumps(schema, separators=(",", ":")).encode()}),
                             schema, instant.timestamp)
    name = f".{FILE_ID}_{instant.timestamp}.log.1_{WRITE_TOKEN}"
    io.create_exclusive(join(mdt, FILES, name), block)
    stat = WriteStat(
        file_id=FILE_ID, path=f"{FILES}/{name}", partition_path=FILES, prev_commit=instant.timestamp,
        num_writes=len(cells), num_inserts=0, num_update_writes=len(cells), num_deletes=0,
        total_write_bytes=len(block), file_size=len(block), log_version=1, log_offset=0, base_file="",
        log_files=(name,), total_log_records=len(cells), total_log_blocks=1,
    )
    named = schema_metadata(schema)
    metadata = CommitMetadata({FILES: (stat,)}, named, "UPSERT_PREPPED")
    done = writer.complete(inflight, metadata.encode(METADATA_LAYOUT), listed=timeline)
    _named_schemas[mdt] = (done.file_name(METADATA_LAYOUT), named["schema"])
    log.debug("metadata table of %s: deltacommit %s (%d partitions)", base_path, instant.timestamp,
              len(change.files))
