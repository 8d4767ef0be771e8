"""Crash safety of table writes: a writer SIGKILLed before its instant completes leaves a
table that memtier and hudi-rs both read as if that write never happened."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memtier import failpoints
from memtier.hudi import HudiTable
from memtier.hudi.mdt import metadata_table_path
from memtier.hudi.mdtcompact import compact_files_partition, read_files_partition
from memtier.hudi.timeline import State, Timeline, new_instant_time
from tests.support.crash_writer import batch
from tests.support.hudi_spark import listed_files
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.model import TableModel, project

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ["id", "version", "part", "v"]


def expected_after(batches: int) -> list[tuple]:
    model = TableModel(("id",), "version", ("part",), buckets=2)
    for i in range(batches):
        model.upsert(i + 1, batch(i).to_pylist())
    return project(model.rows(), COLUMNS)


def both_readers(path: str) -> tuple[list[tuple], list[tuple]]:
    return rows(HudiTable.open(path).read(), COLUMNS), rows(hudi_rs_read(path), COLUMNS)


def run_writer(path: str, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.crash_writer", path, mode],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def killed_in_batch_1(path: str, mode: str) -> HudiTable:
    """Run the writer in ``mode``, which acknowledges batch 0 and kills itself in batch 1."""
    proc = run_writer(path, mode)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err
    assert out.splitlines() == ["ACK 0"]
    return HudiTable.open(path)


def test_killed_between_files_and_completion(tmp_path: Path) -> None:
    path = str(tmp_path / "tbl")
    table = killed_in_batch_1(path, "die-before-complete")
    pending = table.timeline().pending()
    assert [i.action for i in pending] == ["deltacommit"]  # the dead write's instant
    ours, theirs = both_readers(path)
    assert ours == theirs == expected_after(1)

    # the next writer rolls the dead instant back and carries on
    before = {p.name for p in Path(path).rglob("*") if p.is_file()}
    assert table.rollback_pending() == [pending[0].timestamp]
    after = {p.name for p in Path(path).rglob("*") if p.is_file()}
    assert not any(pending[0].timestamp in name and not name.endswith(("rollback", "requested", "inflight")) for name in after)
    assert before - after  # the dead write's data files are gone
    assert table.timeline().pending() == ()
    assert table.timeline().completed(("rollback",))
    table.write(batch(1))
    ours, theirs = both_readers(path)
    assert ours == theirs == expected_after(2)


def test_killed_between_the_metadata_table_and_the_data_instant(tmp_path: Path) -> None:
    """Hudi's order: the metadata table's deltacommit completes first. A writer killed right
    after it leaves the data instant pending (so Hudi's readers ignore the metadata block:
    its data instant is pending); the rollback forgets the metadata deltacommit (its log
    file and instant files), and the next write is recorded again."""
    path = str(tmp_path / "tbl")
    table = killed_in_batch_1(path, "die-after-metadata-table")
    [pending] = table.timeline().pending()
    mdt = metadata_table_path(path)
    mdt_timeline = Timeline.load(table.io, mdt, 2)
    assert pending.timestamp in {i.timestamp for i in mdt_timeline.completed(("deltacommit",))}
    orphan = Path(mdt, "files", f".files-0000-0_{pending.timestamp}.log.1_0-0-0")
    assert orphan.exists()
    assert rows(table.read(), COLUMNS) == expected_after(1)

    assert table.rollback_pending() == [pending.timestamp]
    assert not orphan.exists()
    assert pending.timestamp not in {i.timestamp for i in Timeline.load(table.io, mdt, 2).instants}
    instant = table.write(batch(1))
    assert instant in {i.timestamp for i in Timeline.load(table.io, mdt, 2).completed(("deltacommit",))}
    assert rows(HudiTable.open(path).read(), COLUMNS) == expected_after(2)


def metadata_listing(table: HudiTable) -> set[tuple[str, str, int]]:
    """The data files Hudi's readers list through the metadata table, with their sizes."""
    found = read_files_partition(table.io, table.path, table.timeline())
    return {(partition, name, size) for partition, names in found.items() for name, size in names.items()}


@pytest.mark.parametrize("point", [failpoints.MDT_COMPACTION_REQUESTED, failpoints.MDT_COMPACTION_WRITTEN])
def test_killed_in_a_compaction_of_the_metadata_table(tmp_path: Path, point: str) -> None:
    """A writer killed in a compaction of the metadata table (its plan requested, or its
    base file written, not completed) leaves the listing through the metadata table as
    it was (the pending compaction's base file is no one's); the next compaction
    finishes it from its plan, and writes go on in the slice it opened."""
    path = str(tmp_path / "tbl")
    proc = run_writer(path, f"die-in-metadata-compaction:{point}")
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == -signal.SIGKILL, err
    assert len(out.splitlines()) == 10
    table = HudiTable.open(path)
    mdt = metadata_table_path(path)
    [pending] = Timeline.load(table.io, mdt, 2).pending(None)
    assert pending.action == "compaction"
    assert pending.state is (State.INFLIGHT if point == failpoints.MDT_COMPACTION_WRITTEN else State.REQUESTED)
    base = Path(mdt, "files", f"files-0000-0_0-0-0_{pending.timestamp}.hfile")
    assert base.exists() == (point == failpoints.MDT_COMPACTION_WRITTEN)
    assert metadata_listing(table) == listed_files(path)
    ours, theirs = both_readers(path)
    assert ours == theirs == expected_after(10)

    table.write(batch(10))  # a write while the compaction is pending
    assert metadata_listing(table) == listed_files(path)
    finished = compact_files_partition(table.io, path, table.timeline(), lambda after: new_instant_time(after))
    assert finished == pending.timestamp and base.exists()
    assert [i.action for i in Timeline.load(table.io, mdt, 2).pending(None)] == []
    assert metadata_listing(table) == listed_files(path)
    table.write(batch(11))
    assert metadata_listing(table) == listed_files(path)
    assert rows(HudiTable.open(path).read(), COLUMNS) == expected_after(12)


def _metadata_table_files(path: str, timestamp: str) -> list[str]:
    """The files of the metadata table's deltacommit ``timestamp``: instant and log files."""
    return sorted(p.name for p in Path(metadata_table_path(path)).rglob("*") if timestamp in p.name)


@pytest.mark.parametrize(("mode", "lost"), [
    ("die-after-metadata-pending", ()),
    ("die-after-metadata-pending", ("requested",)),
    ("die-after-metadata-pending", ("inflight",)),
    ("die-after-metadata-pending", ("requested", "inflight")),
    ("die-after-metadata-log", ()),
])
def test_killed_with_the_metadata_tables_deltacommit_pending(tmp_path: Path, mode: str, lost: tuple[str, ...]) -> None:
    """A writer killed once the metadata table's deltacommit is requested and inflight
    (made durable together by one sync of the folder), before its log file or after it.
    ``lost``: the files a crash of the machine before that sync returned may lose too
    (emulated by deleting them). Readers read the table as before the write; the data
    instant's rollback forgets whatever is left of the deltacommit, and the next write is
    recorded."""
    path = str(tmp_path / "tbl")
    table = killed_in_batch_1(path, mode)
    [pending] = table.timeline().pending()
    folder = Path(metadata_table_path(path), ".hoodie", "timeline")
    log_file = [f".files-0000-0_{pending.timestamp}.log.1_0-0-0"] if mode == "die-after-metadata-log" else []
    assert _metadata_table_files(path, pending.timestamp) == sorted([
        f"{pending.timestamp}.deltacommit.inflight", f"{pending.timestamp}.deltacommit.requested", *log_file])
    for state in lost:
        (folder / f"{pending.timestamp}.deltacommit.{state}").unlink()
    assert rows(table.read(), COLUMNS) == expected_after(1)

    assert table.rollback_pending() == [pending.timestamp]
    assert _metadata_table_files(path, pending.timestamp) == []
    assert table.timeline().pending() == () and table.timeline().completed(("rollback",))
    instant = table.write(batch(1))
    assert instant in {i.timestamp for i in Timeline.load(table.io, metadata_table_path(path), 2).completed()}
    assert rows(HudiTable.open(path).read(), COLUMNS) == expected_after(2)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_killed_at_random_moments(tmp_path: Path, seed: int) -> None:
    """Rounds of a writer looping over batches 0, 1, 2, ... killed at a random moment.

    Batch ``i`` has fixed contents, so after every round the table must hold exactly
    batches ``0..m-1`` where ``m`` is the most batches any round completed: the number
    of ACKs, or one more when the kill landed after a completion but before its ACK.
    """
    path = str(tmp_path / "tbl")
    rng = random.Random(seed)
    completed = 0
    for _round in range(3):
        proc = run_writer(path, "loop")
        time.sleep(rng.uniform(1.5, 4.0))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        acks = sum(1 for line in out.splitlines() if line.startswith("ACK"))
        ours, theirs = both_readers(path)
        assert ours == theirs
        candidates = {max(completed, acks), max(completed, acks + 1)}
        matching = [m for m in sorted(candidates) if ours == expected_after(m)]
        assert matching, f"table matches no acknowledged prefix (acks={acks}, before={completed})"
        completed = matching[0]
