"""The master's commit path: any action begun, planned, completed or rolled back through
the master, with Hudi-style optimistic conflict checks (and the bookkeeping behind them)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from memtier.errors import CommitFailedError
from memtier.hudi.commit import WriteStat
from memtier.hudi.table import HudiTable
from memtier.hudi.timeline import State
from memtier.hudi.writer import commit_metadata
from memtier.master.commits import CommitLog
from memtier.master.master import Master

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64())])


# == the bookkeeping ======================================================================


def test_an_instant_conflicts_with_one_that_completed_on_its_file_groups_after_it_began() -> None:
    log = CommitLog()
    log.begin("001", "deltacommit", "ts-0", [("p", "a")])
    log.begin("002", "replacecommit", "backfill", [("p", "b")])
    log.complete("001")
    assert log.conflicts("002", [("p", "b")]) == []
    assert log.conflicts("002", [("p", "a")]) == ["deltacommit 001 by ts-0 wrote file groups p/a"]
    log.touch("002", [("p", "a")])  # file groups known once planned count as well
    assert log.conflicts("002", []) == ["deltacommit 001 by ts-0 wrote file groups p/a"]


def test_an_instant_does_not_conflict_with_what_completed_before_it_began() -> None:
    log = CommitLog()
    log.begin("001", "deltacommit", "ts-0", [("", "a")])
    log.complete("001")
    log.begin("002", "deltacommit", "backfill", [("", "a")])
    assert log.conflicts("002", [("", "a")]) == []


def test_a_pending_instant_on_the_same_file_groups_is_a_conflict() -> None:
    log = CommitLog()
    log.begin("001", "deltacommit", "backfill", [])
    log.begin("002", "deltacommit", "ts-1", [("", "a")])
    assert log.conflicts("001", [("", "a")]) == ["deltacommit 002 by ts-1 wrote file groups <root>/a (pending)"]
    log.forget("002")
    assert log.conflicts("001", [("", "a")]) == []


def test_an_unknown_instant_cannot_be_completed() -> None:
    log = CommitLog()
    with pytest.raises(CommitFailedError, match="not pending on the master"):
        log.pending("001")
    log.begin("001", "deltacommit", "w")
    log.complete("001")
    with pytest.raises(CommitFailedError, match="not pending"):
        log.pending("001")


def test_an_instant_older_than_what_the_log_remembers_is_refused(monkeypatch) -> None:
    monkeypatch.setattr("memtier.master.commits._KEEP_COMPLETED", 3)
    log = CommitLog()
    log.begin("000", "deltacommit", "backfill", [("", "z")])
    for i in range(1, 6):
        log.begin(f"00{i}", "deltacommit", "ts-0", [("", "a")])
        log.complete(f"00{i}")
    assert log.conflicts("000", [("", "z")]) == [
        "2 instants completed since 000 began that the master no longer remembers"
    ]


def test_a_leased_instant_lapses_when_its_writer_is_not_heard_and_not_for_silence_before_since() -> None:
    log = CommitLog()
    log.begin("001", "deltacommit", "backfill", leased_at=100.0)
    log.begin("002", "deltacommit", "ts-0")  # a table server's: no lease (its life is watched instead)
    assert log.lapsed(109.0, 10.0, since=0.0) == []
    log.renew("001", 105.0)
    assert log.lapsed(114.0, 10.0, since=0.0) == []
    assert log.lapsed(116.0, 10.0, since=0.0) == [("001", "backfill", 11.0)]
    assert log.lapsed(116.0, 10.0, since=110.0) == []  # the master itself did not run before 110
    with pytest.raises(CommitFailedError, match="no lease"):
        log.renew("002", 116.0)
    log.forget("001")
    with pytest.raises(CommitFailedError, match="not pending"):
        log.renew("001", 117.0)


# == the master ===========================================================================


@pytest.fixture
def master(tmp_path) -> Master:
    m = Master(str(tmp_path), connect=lambda *_: None)  # no table servers: commits only
    m.create_table("t", SCHEMA, "id", ordering_field="ts", buckets=2)
    return m


def _content(master: Master, file_ids: list[str]) -> bytes:
    meta = master._meta("t")
    stats = [
        WriteStat(file_id=f, path=f"{f}.parquet", partition_path="", prev_commit="null", num_writes=1,
                  num_inserts=1, num_update_writes=0, num_deletes=0, total_write_bytes=1, file_size=1)
        for f in file_ids
    ]
    return commit_metadata(meta, stats, "UPSERT").to_json()


def _states(master: Master) -> dict[str, State]:
    timeline = master._meta("t").timeline()
    return {i.timestamp: i.state for i in timeline.instants if i.action != "rollback"}


def test_begin_inflight_complete_puts_a_completed_instant_on_the_timeline(master: Master) -> None:
    instant = master.begin_commit("t", "deltacommit", owner="w", file_groups=[("", "f1")])
    assert _states(master)[instant] is State.REQUESTED
    master.commit_inflight("t", instant, _content(master, []))
    assert _states(master)[instant] is State.INFLIGHT
    master.complete_commit("t", instant, _content(master, ["f1"]), file_groups=[("", "f1")])
    assert _states(master)[instant] is State.COMPLETED
    assert master.latest_commit("t") == instant


def test_a_checked_commit_that_lost_the_race_is_rolled_back_and_names_the_winner(master: Master) -> None:
    backfill = master.begin_commit("t", "deltacommit", owner="backfill")
    master.commit_inflight("t", backfill, _content(master, []))
    flush = master.begin_commit("t", "deltacommit", owner="ts-0", file_groups=[("", "f1")])
    master.commit_inflight("t", flush, _content(master, []))
    master.complete_commit("t", flush, _content(master, ["f1"]), file_groups=[("", "f1")])
    with pytest.raises(CommitFailedError, match=f"deltacommit {flush} by ts-0 wrote file groups <root>/f1"):
        master.complete_commit("t", backfill, _content(master, ["f1", "f2"]),
                               file_groups=[("", "f1"), ("", "f2")], check_conflicts=True)
    timeline = master._meta("t").timeline()
    assert backfill not in {i.timestamp for i in timeline.instants if i.action == "deltacommit"}
    assert [r.state for r in timeline.instants if r.action == "rollback"] == [State.COMPLETED]
    assert master.latest_commit("t") == flush
    with pytest.raises(CommitFailedError, match="not pending"):  # it cannot complete later either
        master.complete_commit("t", backfill, _content(master, ["f2"]))


def test_a_checked_commit_without_conflicts_completes_beside_other_writers(master: Master) -> None:
    backfill = master.begin_commit("t", "deltacommit", owner="backfill", file_groups=[("", "f2")])
    master.commit_inflight("t", backfill, _content(master, []))
    flush = master.begin_commit("t", "deltacommit", owner="ts-0", file_groups=[("", "f1")])
    master.commit_inflight("t", flush, _content(master, []))
    master.complete_commit("t", flush, _content(master, ["f1"]), file_groups=[("", "f1")])
    master.complete_commit("t", backfill, _content(master, ["f2"]), file_groups=[("", "f2")],
                           check_conflicts=True)
    assert _states(master) == {flush: State.COMPLETED, backfill: State.COMPLETED}


def test_abort_rolls_the_instant_back(master: Master) -> None:
    instant = master.begin_commit("t", "deltacommit", owner="w")
    master.commit_inflight("t", instant, _content(master, []))
    master.abort_commit("t", instant)
    assert instant not in _states(master)
    with pytest.raises(CommitFailedError):
        master.complete_commit("t", instant, _content(master, []))


def test_an_instant_begun_before_a_master_restart_cannot_complete_after_it(tmp_path, master: Master) -> None:
    instant = master.begin_commit("t", "deltacommit", owner="w")
    master.commit_inflight("t", instant, _content(master, []))
    restarted = Master(str(tmp_path), connect=lambda *_: None)  # rolls pending instants back
    with pytest.raises(CommitFailedError, match="not pending"):
        restarted.complete_commit("t", instant, _content(restarted, []))
    assert HudiTable.open(str(tmp_path / "tables" / "t")).timeline().completed() == ()


def test_the_commit_path_over_rpc_carries_plans_file_groups_and_the_conflict_error(master: Master) -> None:
    from memtier.master.service import MasterProxy, MasterService
    from memtier.rpc import RpcServer

    with RpcServer(MasterService(master)) as server:
        proxy = MasterProxy(server.location)
        backfill = proxy.begin_commit("t", "deltacommit", owner="backfill", plan=b"\x00plan")
        meta = master._meta("t")
        assert meta.io.read_bytes(f"{meta.base_path}/.hoodie/{backfill}.deltacommit.requested") == b"\x00plan"
        proxy.commit_inflight("t", backfill, _content(master, []), [("", "f1")])
        flush = proxy.begin_commit("t", "deltacommit", owner="ts-0", file_groups=[("", "f1")])
        proxy.commit_inflight("t", flush, _content(master, []))
        proxy.complete_commit("t", flush, _content(master, ["f1"]), file_groups=[("", "f1")])
        with pytest.raises(CommitFailedError, match="by ts-0"):
            proxy.complete_commit("t", backfill, _content(master, ["f1"]), check_conflicts=True)
        proxy.abort_commit("t", backfill)  # already rolled back: nothing to do
    assert _states(master) == {flush: State.COMPLETED}


def test_the_master_rolls_back_a_leased_instant_whose_writer_went_silent(tmp_path) -> None:
    now = [1000.0]
    master = Master(str(tmp_path), connect=lambda *_: None, writer_lease=10.0, clock=lambda: now[0])
    master.create_table("t", SCHEMA, "id", ordering_field="ts", buckets=2)
    renewed = master.begin_commit("t", "deltacommit", owner="backfill-a", leased=True)
    silent = master.begin_commit("t", "deltacommit", owner="backfill-b", leased=True)
    unleased = master.begin_commit("t", "deltacommit", owner="w")
    now[0] += 8
    master.renew_commit("t", renewed)
    now[0] += 5
    assert master.check_commits() == [silent]
    assert set(_states(master)) == {renewed, unleased}
    with pytest.raises(CommitFailedError, match="not pending"):
        master.renew_commit("t", silent)  # its writer learns it at its next renewal
    master.commit_inflight("t", renewed, _content(master, []))
    master.complete_commit("t", renewed, _content(master, []))
    assert _states(master)[renewed] is State.COMPLETED
