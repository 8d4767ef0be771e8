"""The master's persistent state: pure updates, the JSON file, transaction visibility."""

from __future__ import annotations

import json

import pytest

from memtier.errors import CorruptFileError, UnknownFormatVersionError
from memtier.exchange import AUTOCOMMIT, TxnSnapshot
from memtier.io import open_fileio
from memtier.master.state import (
    KEEP_FENCED,
    MasterState,
    MasterStore,
    TableEntry,
    Txn,
)

PATH = "/cluster/_memtier/master/state.json"


def txn(txn_id: int, state: str = "open", *, ended_ms: int | None = None, batch: str = "") -> Txn:
    return Txn(txn_id, "t", "writer", batch or f"batch-{txn_id}", state, 1_000, ended_ms)


def populated() -> MasterState:
    """A state with a table, its placement and one transaction of each kind."""
    return (
        MasterState()
        .with_table(TableEntry("t", "s3://bucket/t", {"region": "eu"}, 123, options={"schema.evolution": "off"}))
        .with_assignment("t", {0: "ts-0", 1: "ts-1"})
        .with_txn(txn(1, "committed", ended_ms=2_000))
        .with_txn(txn(2, "aborted", ended_ms=2_000))
        .with_txn(txn(3))
        .with_life("ts-0", "00000000000000a0")
        .with_fenced("00000000000000f0")
    )


# == pure updates ==========================================================================


def test_updates_return_new_states_and_leave_the_old_one_unchanged() -> None:
    empty = MasterState()
    with_table = empty.with_table(TableEntry("t", "/data/t"))
    placed = with_table.with_assignment("t", {0: "a"})
    assert dict(empty.tables) == {} and dict(empty.assignments) == {} and empty.epoch == 0
    assert list(with_table.tables) == ["t"] and dict(with_table.assignments) == {}
    assert dict(placed.assignments["t"]) == {0: "a"}
    assert placed.epoch == with_table.epoch + 1  # every placement change bumps the epoch


def test_the_state_cannot_be_changed_in_place() -> None:
    state = populated()
    with pytest.raises(TypeError):
        state.tables["u"] = TableEntry("u", "/u")  # type: ignore[index]
    with pytest.raises(TypeError):
        state.assignments["t"][0] = "other"  # type: ignore[index]
    with pytest.raises(AttributeError):
        state.next_txn = 99  # type: ignore[misc]


def test_with_txn_advances_next_txn_past_the_id_and_never_back() -> None:
    state = MasterState().with_txn(txn(5))
    assert state.next_txn == 6
    resolved = state.with_txn(txn(5, "committed", ended_ms=9))
    assert resolved.next_txn == 6 and resolved.txns[5].state == "committed"
    assert state.txns[5].state == "open"


def test_without_table_drops_its_placement_and_bumps_the_epoch() -> None:
    state = populated().with_table(TableEntry("u", "/u")).with_assignment("u", {0: "a"})
    dropped = state.without_table("t")
    assert list(dropped.tables) == ["u"] and list(dropped.assignments) == ["u"]
    assert dropped.epoch == state.epoch + 1
    assert dropped.txns == state.txns  # transactions are pruned by age, not by table


def test_find_txn_matches_table_writer_and_batch() -> None:
    state = populated().with_txn(Txn(4, "u", "writer", "batch-3", "open", 0))
    assert state.find_txn("t", "writer", "batch-3").txn_id == 3
    assert state.find_txn("u", "writer", "batch-3").txn_id == 4
    assert state.find_txn("t", "other-writer", "batch-3") is None


# == the file ==============================================================================


def test_json_round_trip_keeps_everything() -> None:
    state = populated()
    loaded = MasterState.from_json(state.to_json(), PATH)
    assert loaded == state
    assert loaded.assignments["t"][1] == "ts-1"  # integer bucket keys survive JSON's strings
    assert loaded.snapshot() == state.snapshot()


def test_the_file_is_versioned() -> None:
    body = json.loads(populated().to_json())
    assert body["format"] == "memtier-master-state" and body["version"] == 3


def test_a_version_1_file_is_read_with_no_lives_and_nothing_fenced() -> None:
    body = json.loads(populated().to_json())
    body["version"] = 1
    del body["lives"], body["fenced"]
    loaded = MasterState.from_json(json.dumps(body).encode(), PATH)
    assert dict(loaded.lives) == {} and loaded.fenced == ()
    assert loaded.tables == populated().tables and loaded.txns == populated().txns


def test_a_version_2_file_is_read_with_no_table_options() -> None:
    body = json.loads(populated().to_json())
    body["version"] = 2
    for table in body["tables"]:
        del table["options"]
    loaded = MasterState.from_json(json.dumps(body).encode(), PATH)
    assert all(dict(t.options) == {} for t in loaded.tables.values())
    assert loaded.lives == populated().lives


def test_an_unknown_version_is_refused_naming_path_and_version() -> None:
    body = json.loads(populated().to_json())
    body["version"] = 4
    with pytest.raises(UnknownFormatVersionError, match=r"state\.json.*version 4.*reads 1, 2 and 3"):
        MasterState.from_json(json.dumps(body).encode(), PATH)


def test_fenced_lives_are_remembered_once_and_only_the_newest_are_kept() -> None:
    state = MasterState().with_fenced("a").with_fenced("b").with_fenced("a")
    assert state.fenced == ("a", "b")
    for i in range(KEEP_FENCED + 5):
        state = state.with_fenced(f"{i:016x}")
    assert len(state.fenced) == KEEP_FENCED and state.fenced[-1] == f"{KEEP_FENCED + 4:016x}"
    assert "a" not in state.fenced


@pytest.mark.parametrize(
    "data",
    [b"", b'{"format": "memtier-master-state", "vers', b"[1, 2]", b'{"format": "other", "version": 1}'],
    ids=["empty", "truncated", "not-an-object", "other-format"],
)
def test_a_corrupt_file_is_refused_naming_the_path(data: bytes) -> None:
    with pytest.raises(CorruptFileError) as raised:
        MasterState.from_json(data, PATH)
    assert raised.value.path == PATH and PATH in str(raised.value)


@pytest.mark.parametrize("field", ["tables", "txns", "next_txn"])
def test_a_state_file_missing_a_field_is_refused_naming_the_path(field: str) -> None:
    body = json.loads(populated().to_json())
    del body[field]
    with pytest.raises(CorruptFileError, match="state.json"):
        MasterState.from_json(json.dumps(body).encode(), PATH)


def test_the_store_saves_atomically_and_loads_what_it_saved(tmp_path) -> None:
    path = str(tmp_path / "master" / "state.json")
    store = MasterStore(open_fileio(str(tmp_path)), path)
    assert store.load() == MasterState()  # no file yet: a fresh cluster
    store.save(populated())
    assert MasterStore(open_fileio(str(tmp_path)), path).load() == populated()
    assert sorted(p.name for p in (tmp_path / "master").iterdir()) == ["state.json"]  # no temp left


def test_the_store_refuses_a_corrupt_file_naming_it(tmp_path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"\x00garbage")
    with pytest.raises(CorruptFileError, match="state.json"):
        MasterStore(open_fileio(str(tmp_path)), str(path)).load()


# == transaction snapshots =================================================================

SNAPSHOT = TxnSnapshot(next_txn=6, open=frozenset({3, 5}), aborted=frozenset({2}))


@pytest.mark.parametrize(
    ("txn_id", "committed", "resolved", "latest", "committed_reader"),
    [
        (AUTOCOMMIT, True, True, True, True),
        (1, True, True, True, True),  # below next_txn, neither open nor aborted
        (2, False, True, False, False),  # aborted: resolved, seen by nobody
        (3, False, False, True, False),  # open: seen by latest readers only
        (6, False, False, True, False),  # not begun when the snapshot was taken
    ],
)
def test_snapshot_semantics(
    txn_id: int, committed: bool, resolved: bool, latest: bool, committed_reader: bool
) -> None:
    assert SNAPSHOT.committed(txn_id) is committed
    assert SNAPSHOT.resolved(txn_id) is resolved
    assert SNAPSHOT.visible(txn_id, committed_only=False) is latest
    assert SNAPSHOT.visible(txn_id, committed_only=True) is committed_reader


def test_snapshot_of_a_state_and_its_dict_round_trip() -> None:
    snapshot = populated().snapshot()
    assert snapshot == TxnSnapshot(4, frozenset({3}), frozenset({2}))
    assert TxnSnapshot.from_dict(json.loads(json.dumps(snapshot.to_dict()))) == snapshot


# == pruning ===============================================================================

HOUR = 3_600_000


def test_pruning_forgets_resolved_transactions_past_their_keep_time_only() -> None:
    state = (
        MasterState()
        .with_txn(txn(1, "committed", ended_ms=0))
        .with_txn(txn(2, "committed", ended_ms=10 * HOUR - 1))
        .with_txn(txn(3, "aborted", ended_ms=0))
        .with_txn(txn(4))
    )
    pruned = state.pruned(10 * HOUR, keep_committed_ms=HOUR, keep_aborted_ms=100 * HOUR)
    assert sorted(pruned.txns) == [2, 3, 4]
    assert pruned.next_txn == state.next_txn  # ids are never reused
    assert pruned.snapshot().committed(1)  # a forgotten committed transaction stays committed


def test_pruning_keeps_open_transactions_however_old() -> None:
    state = MasterState().with_txn(txn(1)).with_txn(txn(2, "aborted", ended_ms=0))
    pruned = state.pruned(10**12, keep_committed_ms=0, keep_aborted_ms=0)
    assert list(pruned.txns) == [1] and pruned.txns[1].state == "open"
    assert pruned.snapshot().open == {1}


def test_pruning_nothing_returns_the_same_state() -> None:
    state = populated()
    assert state.pruned(2_000, keep_committed_ms=HOUR, keep_aborted_ms=HOUR) is state
