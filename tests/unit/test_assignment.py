"""Bucket placement and rebalancing: pure functions of the placement and server loads."""

from __future__ import annotations

from collections import Counter

import pytest

from memtier.master.assignment import ServerLoad, place, rebalance_move

MB = 1 << 20


def load(server_id: str, used_mb: float = 0, budget_mb: int = 100, **buckets: int) -> ServerLoad:
    """A server's load; ``buckets`` as ``t_3=10`` means 10 MB held for bucket 3 of table t."""
    held = {(name.rsplit("_", 1)[0], int(name.rsplit("_", 1)[1])): mb * MB for name, mb in buckets.items()}
    return ServerLoad(server_id, int(used_mb * MB), budget_mb * MB, held)


def servers(*loads: ServerLoad) -> dict[str, ServerLoad]:
    return {s.server_id: s for s in loads}


# == place =================================================================================


def test_new_buckets_spread_evenly_over_equally_loaded_servers() -> None:
    placement = place("t", 8, {}, servers(load("a"), load("b"), load("c")), {})
    assert sorted(placement) == list(range(8))
    counts = Counter(placement.values())
    assert set(counts) == {"a", "b", "c"} and max(counts.values()) - min(counts.values()) <= 1


def test_bucket_counts_of_other_tables_are_balanced_too() -> None:
    placement = place("t", 4, {}, servers(load("a"), load("b")), {"a": 4})
    assert Counter(placement.values()) == {"b": 4}  # b catches up before a gets more
    placement = place("t", 6, {}, servers(load("a"), load("b")), {"a": 4})
    assert Counter(placement.values()) == {"b": 5, "a": 1}


def test_memory_fraction_comes_before_bucket_counts() -> None:
    # a holds fewer buckets but is fuller (relative to its own budget): b gets the new ones
    loads = servers(load("a", used_mb=60, budget_mb=100), load("b", used_mb=100, budget_mb=1000))
    placement = place("t", 3, {}, loads, {"a": 0, "b": 10})
    assert set(placement.values()) == {"b"}


def test_ties_are_broken_by_server_id_so_placement_is_deterministic() -> None:
    loads = servers(load("b"), load("a"))
    assert place("t", 1, {}, loads, {}) == {0: "a"}
    assert place("t", 4, {}, loads, {}) == place("t", 4, {}, servers(load("a"), load("b")), {})


def test_buckets_on_live_servers_keep_their_owner() -> None:
    current = {0: "b", 1: "b", 2: "b", 3: "a"}
    placement = place("t", 4, current, servers(load("a"), load("b", used_mb=99), load("c")), {"b": 3})
    assert placement == current  # even though b is full and c empty: no needless moves


def test_buckets_of_servers_that_are_gone_move_to_live_ones() -> None:
    current = {0: "a", 1: "gone", 2: "b", 3: "gone"}
    placement = place("t", 4, current, servers(load("a"), load("b")), {"a": 1, "b": 1})
    assert placement[0] == "a" and placement[2] == "b"
    assert {placement[1], placement[3]} == {"a", "b"}  # one each: counts stay balanced


def test_without_live_servers_the_placement_is_unchanged() -> None:
    assert place("t", 2, {0: "a"}, {}, {}) == {0: "a"}


# == rebalance =============================================================================


def test_a_hot_server_gives_its_largest_bucket_to_a_cold_one() -> None:
    loads = servers(load("hot", 90, t_0=10, t_1=50, t_2=30), load("cold", 10))
    assignments = {"t": {0: "hot", 1: "hot", 2: "hot"}}
    assert rebalance_move(assignments, loads) == ("t", 1, "hot", "cold")


@pytest.mark.parametrize(
    ("hot_mb", "cold_mb", "bucket_mb"),
    [
        (80, 10, 20),  # hot exactly at high: not over it
        (70, 10, 20),  # hot under high
        (90, 50, 20),  # cold exactly at low: not under it
        (90, 45, 36),  # cold would end at 81% >= high: it would only shift the overload
    ],
    ids=["hot-at-high", "hot-under-high", "cold-at-low", "cold-would-overload"],
)
def test_no_move_unless_hot_over_high_and_cold_under_low_and_staying_under_high(
    hot_mb: float, cold_mb: float, bucket_mb: float
) -> None:
    loads = servers(load("hot", hot_mb, t_0=bucket_mb), load("cold", cold_mb))
    assert rebalance_move({"t": {0: "hot"}}, loads) is None


def test_move_when_cold_stays_just_under_high() -> None:
    loads = servers(load("hot", 90, t_0=34), load("cold", 45))  # cold ends at 79%
    assert rebalance_move({"t": {0: "hot"}}, loads) == ("t", 0, "hot", "cold")


def test_thresholds_are_parameters() -> None:
    loads = servers(load("hot", 70, t_0=10), load("cold", 10))
    assert rebalance_move({"t": {0: "hot"}}, loads) is None
    assert rebalance_move({"t": {0: "hot"}}, loads, high=0.6, low=0.2) == ("t", 0, "hot", "cold")


def test_only_buckets_the_hot_server_still_owns_are_moved() -> None:
    # the server still reports memory of bucket 1, which has already moved to "cold"
    loads = servers(load("hot", 90, t_0=5, t_1=60), load("cold", 10))
    assert rebalance_move({"t": {0: "hot", 1: "cold"}}, loads) == ("t", 0, "hot", "cold")
    assert rebalance_move({"t": {1: "cold"}}, loads) is None


def test_no_move_with_fewer_than_two_servers() -> None:
    assert rebalance_move({"t": {0: "hot"}}, servers(load("hot", 99, t_0=50))) is None
    assert rebalance_move({}, {}) is None
