"""Placing buckets on table servers: pure functions of the current placement and loads.

The unit of placement is a table's bucket: every partition's file group of that bucket
lives on the same table server, so a client routes a row by its bucket alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ServerLoad", "place", "rebalance_move"]


@dataclass(frozen=True)
class ServerLoad:
    """What the master knows of one live table server's memory."""

    server_id: str
    memory_used: int
    memory_budget: int
    #: bytes held per (table, bucket), as the server last reported
    bucket_memory: Mapping[tuple[str, int], int]

    @property
    def fraction(self) -> float:
        return self.memory_used / self.memory_budget if self.memory_budget else 0.0


def place(
    table: str,
    buckets: int,
    current: Mapping[int, str],
    servers: Mapping[str, ServerLoad],
    counts: Mapping[str, int],
) -> dict[int, str]:
    """The table's placement: buckets on live servers keep them; the others (new, or on
    a server that is gone) go one by one to the live server with the lowest projected
    memory fraction (its memory plus, per bucket placed here, the cluster's average
    bytes per bucket), then the fewest buckets (of all tables, ``counts``)."""
    if not servers:
        return dict(current)
    assigned = {s: counts.get(s, 0) for s in servers}
    held = sum(load.memory_used for load in servers.values())
    per_bucket = held / max(1, sum(assigned.values()))
    added = dict.fromkeys(servers, 0)

    def score(load: ServerLoad) -> tuple[float, int, str]:
        projected = load.memory_used + per_bucket * added[load.server_id]
        fraction = projected / load.memory_budget if load.memory_budget else 0.0
        return (fraction, assigned[load.server_id], load.server_id)

    placement: dict[int, str] = {}
    for bucket in range(buckets):
        owner = current.get(bucket)
        if owner in servers:
            placement[bucket] = owner
            continue
        best = min(servers.values(), key=score)
        placement[bucket] = best.server_id
        assigned[best.server_id] += 1
        added[best.server_id] += 1
    return placement


def rebalance_move(
    assignments: Mapping[str, Mapping[int, str]],
    servers: Mapping[str, ServerLoad],
    *,
    high: float = 0.8,
    low: float = 0.5,
) -> tuple[str, int, str, str] | None:
    """One bucket to move off an overloaded server: ``(table, bucket, from, to)``.

    A server over ``high`` of its memory budget gives its largest bucket to the least
    loaded server when that one is under ``low`` and would stay under ``high`` after
    taking it; otherwise None (moving would only shift the overload).
    """
    if len(servers) < 2:
        return None
    hot = max(servers.values(), key=lambda load: load.fraction)
    cold = min(servers.values(), key=lambda load: load.fraction)
    if hot.fraction <= high or cold.fraction >= low or hot is cold:
        return None
    owned = [
        (memory, table, bucket)
        for (table, bucket), memory in hot.bucket_memory.items()
        if assignments.get(table, {}).get(bucket) == hot.server_id
    ]
    if not owned:
        return None
    memory, table, bucket = max(owned)
    if cold.memory_budget and (cold.memory_used + memory) / cold.memory_budget >= high:
        return None
    return table, bucket, hot.server_id, cold.server_id
