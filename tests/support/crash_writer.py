"""A writer process for crash tests: ``python -m tests.support.crash_writer PATH MODE``.

It writes deterministic batches (batch ``i`` upserts keys ``i*7 .. i*7+39`` at version
``i``) and prints ``ACK <i> <instant>`` after each write returns. MODE:

* ``loop``: write batches forever (the parent SIGKILLs it at a random moment);
* ``die-before-complete``: write batch 0, then batch 1 but SIGKILL itself after every data
  file of batch 1 is durable and before its instant completes;
* ``die-after-metadata-table``: on a new table of version 9 with a metadata table
  (``files`` partition), the same, but SIGKILL itself after the metadata table's
  deltacommit of batch 1 completed, before the data instant completes;
* ``die-in-metadata-compaction:<failpoint>``: on such a table, write batches 0-9 (ten
  metadata deltacommits), then compact the metadata table and SIGKILL itself at the
  failpoint (:data:`memtier.failpoints.MDT_COMPACTION_REQUESTED` or ``..._WRITTEN``).
* ``die-after-metadata-pending``: the same, but SIGKILL itself once the metadata table's
  deltacommit of batch 1 is requested and inflight (durable), before its log file;
* ``die-after-metadata-log``: the same, but SIGKILL itself once that deltacommit's log
  file is durable, before the deltacommit completes.
"""

from __future__ import annotations

import os
import signal
import sys

import pyarrow as pa

import memtier.hudi.tablemeta
from memtier import failpoints
from memtier.hudi import HudiTable
from memtier.hudi.mdtcompact import compact_files_partition
from memtier.hudi.mdtfiles import record_instant
from memtier.hudi.timeline import TimelineWriter, new_instant_time
from memtier.io import LocalFileIO
from tests.support.metadata_table import add_metadata_table

SCHEMA = pa.schema([("id", pa.int64()), ("version", pa.int64()), ("part", pa.string()), ("v", pa.string())])


def batch(i: int) -> pa.Table:
    ids = list(range(i * 7, i * 7 + 40))
    return pa.table(
        {
            "id": ids,
            "version": [i] * len(ids),
            "part": [f"p{k % 3}" for k in ids],
            "v": [f"b{i}-{k}" for k in ids],
        },
        schema=SCHEMA,
    )


def open_or_create(path: str, table_version: int = 6) -> HudiTable:
    if os.path.exists(os.path.join(path, ".hoodie", "hoodie.properties")):
        return HudiTable.open(path)
    return HudiTable.create(
        path, SCHEMA, record_key="id", ordering_field="version", partition_fields="part", buckets=2,
        table_version=table_version,
    )


def die(*_args: object, **_kwargs: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def record_then_die(*args: object) -> None:
    record_instant(*args)  # type: ignore[arg-type]
    die()


def compact_metadata_table_and_die(path: str, point: str) -> None:
    table = with_metadata_table(path)
    for i in range(10):
        table.write(batch(i))
        print(f"ACK {i}", flush=True)
    failpoints.arm(point, die)
    compact_files_partition(table.io, path, table.timeline(), lambda after: new_instant_time(after))
    raise AssertionError("unreachable: the process kills itself in the compaction")


def with_metadata_table(path: str) -> HudiTable:
    """A new table of version 9 with a stand-in of Hudi's metadata table."""
    table = open_or_create(path, table_version=9)
    add_metadata_table(table.io, path)
    return HudiTable.open(path)


def start_then_die(writer: TimelineWriter, timestamp: str, action: str) -> None:
    START(writer, timestamp, action)
    die()


def create_then_die_in_metadata_table(io: LocalFileIO, path: str, data: bytes) -> None:
    CREATE(io, path, data)
    if "/.hoodie/metadata/files/" in path:
        die()


START = TimelineWriter.start
CREATE = LocalFileIO.create_exclusive
METADATA_TABLE_MODES = ("die-after-metadata-table", "die-after-metadata-pending", "die-after-metadata-log")


def main() -> None:
    path, mode = sys.argv[1], sys.argv[2]
    if mode.startswith("die-in-metadata-compaction:"):
        compact_metadata_table_and_die(path, mode.split(":", 1)[1])
        return
    if mode in METADATA_TABLE_MODES:
        table = with_metadata_table(path)
    else:
        table = open_or_create(path)
    if mode in ("die-before-complete", *METADATA_TABLE_MODES):
        table.write(batch(0))
        print("ACK 0", flush=True)
        if mode == "die-before-complete":
            TimelineWriter.complete = die  # type: ignore[method-assign]
        elif mode == "die-after-metadata-pending":
            TimelineWriter.start = start_then_die  # type: ignore[method-assign]
        elif mode == "die-after-metadata-log":
            LocalFileIO.create_exclusive = create_then_die_in_metadata_table  # type: ignore[method-assign]
        else:
            memtier.hudi.tablemeta.record_instant = record_then_die  # type: ignore[attr-defined]
        table.write(batch(1))
        raise AssertionError("unreachable: the process kills itself before completing")
    i = 0
    while True:
        instant = table.write(batch(i))
        print(f"ACK {i} {instant}", flush=True)
        i += 1


if __name__ == "__main__":
    main()
