"""A rollback deletes only the files its instant wrote."""

from __future__ import annotations

import pyarrow as pa

from memtier.hudi import HudiTable
from memtier.hudi.filenames import LogFile, classify
from memtier.hudi.timeline import TimelineWriter, new_instant_time
from memtier.hudi.writer import rollback_instant


def test_a_rollback_leaves_a_log_file_another_writer_created_under_the_name_it_planned(tmp_path) -> None:
    """Two writers of one file group can plan the same next log file (a table server taken
    for dead and the one that took its buckets over); files are created exclusively, so one
    of them wrote it, and rolling the other back must not delete it."""
    schema = pa.schema([("id", pa.int64()), ("ts", pa.int64())])
    table = HudiTable.create(str(tmp_path / "t"), schema, "id", "ts", None, 1)
    for ts in (1, 2):
        table.write(pa.table({"id": [1, 2], "ts": [ts, ts]}, schema=schema))
    taken = table.write(pa.table({"id": [1, 2], "ts": [3, 3]}, schema=schema))  # the other writer's
    timeline = table.timeline()
    done = next(i for i in timeline.completed() if i.timestamp == taken)
    content = table.io.read_bytes(timeline.instant_path(table.path, done))
    zombie = new_instant_time(timeline.last_timestamp())
    writer = TimelineWriter(table.io, table.path)
    writer.inflight(writer.request(zombie, "deltacommit"), content)  # planned the very same file
    pending = next(i for i in table.timeline().pending(None) if i.timestamp == zombie)
    rollback_instant(table.meta, pending, table.timeline())
    logs = [f for f in table.io.list_files(table.path) if isinstance(classify(f.name), LogFile)]
    assert len(logs) == 2  # the other writer's log file is still there
    assert sorted(table.read()["ts"].to_pylist()) == [3, 3]
