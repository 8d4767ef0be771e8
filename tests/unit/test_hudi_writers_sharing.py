"""The master shares a table with Apache Hudi's writers (optimistic concurrency control):
Hudi's file-system table lock, heartbeats of its pending instants, and conflicts with
instants another writer completed on the timeline (the real Hudi on Spark in
tests/interop/test_hudi_concurrent_writers.py)."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from memtier.errors import CommitFailedError
from memtier.hudi.commit import WriteStat
from memtier.hudi.heartbeat import heartbeat_path
from memtier.hudi.lock import TableLock, lock_path
from memtier.hudi.timeline import Instant, TimelineWriter, new_instant_time
from memtier.hudi.writer import commit_metadata
from memtier.io import open_fileio
from memtier.master.master import Master

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64())])


@pytest.fixture
def now() -> list[float]:
    """The master's clock: the wall clock's now (heartbeats' ages are file times), moved by tests."""
    return [time.time()]


@pytest.fixture
def master(tmp_path, now: list[float]) -> Master:
    m = Master(str(tmp_path), connect=lambda *_: None, clock=lambda: now[0])  # no table servers: commits only
    m.create_table("t", SCHEMA, "id", ordering_field="ts", buckets=2)
    return m


def _content(master: Master, file_ids: list[str]) -> bytes:
    stats = [
        WriteStat(file_id=f, path=f"{f}.parquet", partition_path="", prev_commit="null", num_writes=1,
                  num_inserts=1, num_update_writes=0, num_deletes=0, total_write_bytes=1, file_size=1)
        for f in file_ids
    ]
    return commit_metadata(master._meta("t"), stats, "UPSERT").to_json()


def _hudi_begins(master: Master) -> Instant:
    """Another writer (Hudi's) requests and starts a deltacommit, with a live heartbeat."""
    meta = master._meta("t")
    writer = TimelineWriter(meta.io, meta.base_path, meta.config.timeline_layout_version)
    requested = writer.request(new_instant_time(meta.timeline().last_timestamp()), "deltacommit")
    meta.io.write_atomic(heartbeat_path(meta.base_path, requested.timestamp), b"")
    return writer.inflight(requested)


def _hudi_completes(master: Master, inflight: Instant, file_ids: list[str]) -> None:
    meta = master._meta("t")
    TimelineWriter(meta.io, meta.base_path, meta.config.timeline_layout_version).complete(
        inflight, _content(master, file_ids))
    meta.io.delete(heartbeat_path(meta.base_path, inflight.timestamp))


def _begin(master: Master, file_id: str) -> str:
    instant = master.begin_commit("t", "deltacommit", owner="ts-0", file_groups=[("", file_id)])
    master.commit_inflight("t", instant, _content(master, []))
    return instant


# == the lock ==============================================================================


def test_the_table_lock_is_hudis_lock_file_waited_for_and_let_go_only_by_its_holder(tmp_path) -> None:
    io = open_fileio(str(tmp_path))
    clock = [0.0]
    ours = TableLock(io, str(tmp_path), "m1", wait_s=1.0, clock=lambda: clock[0],
                     sleep=lambda s: clock.__setitem__(0, clock[0] + s))
    io.write_atomic(lock_path(str(tmp_path)), b'{"lockThreadName": "pool-7-thread-1"}')  # Hudi's
    with pytest.raises(CommitFailedError, match="held by 'pool-7-thread-1' for over 1s"):
        ours.acquire()
    ours.release()  # not ours to delete
    assert ours.clear_stale() is False  # a Hudi writer's lock is never broken
    assert io.exists(lock_path(str(tmp_path)))
    io.delete(lock_path(str(tmp_path)))
    with ours.held(), ours.held():  # reentrant
        assert ours.holder() == "memtier-master m1"
    assert ours.holder() is None
    ours.acquire()  # a master dies holding it; the next one clears it
    assert TableLock(io, str(tmp_path), "m2").clear_stale() is True
    assert ours.holder() is None


def test_the_master_makes_instant_times_and_completes_under_the_table_lock(master: Master) -> None:
    meta = master._meta("t")
    meta.io.write_atomic(lock_path(meta.base_path), b"{}")  # a Hudi writer holds it
    master._sharing("t", meta)[0]._wait_s = 0.05
    with pytest.raises(CommitFailedError, match="table lock .* is held"):
        master.begin_commit("t", "deltacommit", owner="ts-0")
    meta.io.delete(lock_path(meta.base_path))
    instant = _begin(master, "f1")
    meta.io.write_atomic(lock_path(meta.base_path), b"{}")
    with pytest.raises(CommitFailedError, match="table lock .* is held"):
        master.complete_commit("t", instant, _content(master, ["f1"]))
    meta.io.delete(lock_path(meta.base_path))
    master.complete_commit("t", instant, _content(master, ["f1"]))
    assert not meta.io.exists(lock_path(meta.base_path))


# == heartbeats ============================================================================


def test_a_pending_instant_keeps_a_hudi_heartbeat_until_it_completes_or_rolls_back(
    master: Master, now: list[float]
) -> None:
    meta = master._meta("t")
    done, aborted = _begin(master, "f1"), _begin(master, "f2")
    for instant in (done, aborted):
        assert meta.io.read_bytes(heartbeat_path(meta.base_path, instant)) == b"memtier"
    meta.io.delete(heartbeat_path(meta.base_path, done))
    now[0] += 11  # renewed well within Hudi's expiry (120 s by default)
    master.check_commits()
    assert meta.io.exists(heartbeat_path(meta.base_path, done))
    master.complete_commit("t", done, _content(master, ["f1"]))
    master.abort_commit("t", aborted)
    assert not meta.io.exists(heartbeat_path(meta.base_path, done))
    assert not meta.io.exists(heartbeat_path(meta.base_path, aborted))


def test_a_restarted_master_leaves_a_live_hudi_writers_instant_pending(tmp_path, master: Master) -> None:
    _begin(master, "f1")  # the master's: rolled back
    hudis = _hudi_begins(master)
    restarted = Master(str(tmp_path), connect=lambda *_: None)
    pending = {i.timestamp for i in restarted._meta("t").timeline().pending()}
    assert pending == {hudis.timestamp}


# == other writers' instants ===============================================================


def test_a_completion_is_refused_when_a_hudi_writer_completed_into_its_file_groups_since_it_began(
    master: Master,
) -> None:
    before = _hudi_begins(master)
    _hudi_completes(master, before, ["f1"])  # completed before the flush began: no conflict
    flush = _begin(master, "f1")
    elsewhere, same = _hudi_begins(master), _hudi_begins(master)
    _hudi_completes(master, elsewhere, ["f2"])
    _hudi_completes(master, same, ["f1"])
    with pytest.raises(CommitFailedError, match=f"deltacommit {same.timestamp} by another writer"
                                                r" \(Hudi's\) wrote file groups <root>/f1$"):
        master.complete_commit("t", flush, _content(master, ["f1"]), file_groups=[("", "f1")])
    timeline = master._meta("t").timeline()
    assert flush not in {i.timestamp for i in timeline.instants if i.action == "deltacommit"}
    again = _begin(master, "f1")
    master.complete_commit("t", again, _content(master, ["f1"]), file_groups=[("", "f1")])


def test_a_completion_a_live_hudi_writer_would_miss_is_refused(master: Master) -> None:
    early = _begin(master, "f1")
    late = _begin(master, "f2")
    master.complete_commit("t", late, _content(master, ["f2"]))
    hudis = _hudi_begins(master)  # its check will look at instants requested after `late` only
    with pytest.raises(CommitFailedError, match=f"writer of {hudis.timestamp} checks only instants requested"):
        master.complete_commit("t", early, _content(master, ["f1"]))
    _hudi_completes(master, hudis, ["f3"])
    retried = _begin(master, "f1")
    master.complete_commit("t", retried, _content(master, ["f1"]))


def test_a_compaction_completes_beside_a_live_hudi_writer(master: Master) -> None:
    """A log write and a compaction never conflict (Hudi's rule), so Hudi's check missing
    the compaction loses nothing."""
    compaction = master.begin_commit("t", "compaction", owner="pool", file_groups=[("", "f1")])
    master.start_pending("t", compaction)
    late = _begin(master, "f2")
    master.complete_commit("t", late, _content(master, ["f2"]))
    _hudi_begins(master)
    master.complete_commit("t", compaction, _content(master, ["f1"]))
    assert master._meta("t").timeline().is_completed(compaction)


def test_a_schema_change_leaves_no_heartbeat(master: Master) -> None:
    master.evolve_schema("t", SCHEMA.append(pa.field("extra", pa.string())))
    meta = master._meta("t")
    assert meta.schema.names == ["id", "ts", "extra"]
    assert [f.name for f in meta.io.list_dir(f"{meta.base_path}/.hoodie/.heartbeat")] == []
