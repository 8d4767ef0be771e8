"""The write-tier scenario suite: random interleavings of writes, transactions, flushes,
evictions, table-server restarts and retried writes, checked after every step against a
model. The same driver runs against the in-process core (tests/support/inprocess.py) and
against real Ray actors, through a small :class:`Harness` each provides.

The tier writes no deletes, so Hudi's merge (``memtier.hudi.merge``) needs no layout
knowledge here: a key's visible version is its greatest ordering value, the later write
winning ties, wherever the versions sit (memory, WAL, base file, log file).
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from memtier.client import Client
from memtier.hudi import HudiTable
from tests.support.hudirs import hudi_rs_read, rows

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("p", pa.string()), ("v", pa.string())])
COLUMNS = SCHEMA.names
AUTOCOMMIT = 0
KEYS = 40  # ids are drawn from range(KEYS)


class Harness(Protocol):
    """What a scenario needs from a cluster besides its client."""

    client: Client
    servers: int

    def evict(self) -> None: ...

    def restart(self, index: int) -> None: ...


@dataclass
class TierModel:
    """Every acknowledged write, in order, with its transaction."""

    writes: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    states: dict[int, str] = field(default_factory=lambda: {AUTOCOMMIT: "committed"})

    def add(self, txn: int, batch: list[dict[str, Any]]) -> None:
        self.writes.extend((txn, row) for row in batch)

    def _view(self, visible: set[str]) -> list[tuple]:
        best: dict[Hashable, tuple[int, int, dict[str, Any]]] = {}
        for position, (txn, row) in enumerate(self.writes):
            if self.states.get(txn, "open") not in visible:
                continue
            current = best.get(row["id"])
            if current is None or (row["ts"], position) >= current[:2]:
                best[row["id"]] = (row["ts"], position, row)
        return sorted(
            (tuple(r[c] for c in COLUMNS) for _, _, r in best.values()),
            key=lambda t: tuple(repr(v) for v in t),
        )

    def latest(self) -> list[tuple]:
        return self._view({"open", "committed"})

    def committed(self) -> list[tuple]:
        return self._view({"committed"})


def make_batch(rng: random.Random, tag: str, size: int) -> list[dict[str, Any]]:
    return [
        {"id": (k := rng.randrange(KEYS)), "ts": rng.randrange(5), "p": f"p{k % 2}", "v": f"{tag}-{i}"}
        for i in range(size)
    ]


def random_ops(rng: random.Random, steps: int, servers: int) -> list[tuple[Any, ...]]:
    """A random scenario: each op a tuple (kind, args...)."""
    kinds = ["write"] * 6 + ["begin", "txwrite", "txwrite", "commit", "abort", "flush", "evict", "retry", "restart"]
    return [
        (kind, rng.randrange(1 << 30), rng.randrange(servers))
        for kind in (rng.choice(kinds) for _ in range(steps))
    ]


def check_key_filtered_reads(client: Client, table: str, model: TierModel, rng: random.Random) -> None:
    """Reads filtered on the record key (pushed to the table servers and before the merge,
    buckets pruned) equal the model's rows of those keys; a filter on another column as
    well still sees only each key's latest version."""
    keys = sorted(rng.sample(range(KEYS), 3))
    latest = model.latest()
    one = client.read(table, filters=[("id", "=", keys[0])])
    assert rows(one, COLUMNS) == [r for r in latest if r[0] == keys[0]]
    some = client.read(table, filters=[("id", "in", keys)])
    assert rows(some, COLUMNS) == [r for r in latest if r[0] in keys]
    old = client.read(table, filters=[("id", "in", keys), ("ts", "<", 2)])
    assert rows(old, COLUMNS) == [r for r in latest if r[0] in keys and r[1] < 2]


def run_scenario(harness: Harness, table: str, path: str, ops: list[tuple[Any, ...]]) -> TierModel:
    """Apply ``ops``, checking read(latest) and read(committed) after each; at the end
    resolve every transaction, flush, and check memtier and hudi-rs on the Hudi table."""
    client = harness.client
    client.create_table(table, SCHEMA, record_key="id", ordering_field="ts", partition_fields="p",
                        buckets=4, path=path)
    model = TierModel()
    open_txns: list[Any] = []
    last: tuple[pa.Table, int, int] | None = None  # (batch, txn, sequence) of the last write
    for step, (kind, seed, server) in enumerate(ops):
        rng = random.Random(seed)
        batch = make_batch(rng, f"s{step}", rng.randrange(1, 12))
        if kind == "write":
            result = client.write(table, pa.Table.from_pylist(batch, schema=SCHEMA))
            model.add(AUTOCOMMIT, batch)
            last = (pa.Table.from_pylist(batch, schema=SCHEMA), AUTOCOMMIT, result.sequence)
        elif kind == "begin" and len(open_txns) < 2:
            context = client.transaction(table, batch_id=f"step-{step}")
            tx = context.__enter__()
            model.states[tx.txn_id] = "open"
            open_txns.append((context, tx))
        elif kind == "txwrite" and open_txns:
            _, tx = open_txns[seed % len(open_txns)]
            result = tx.write(pa.Table.from_pylist(batch, schema=SCHEMA))
            model.add(tx.txn_id, batch)
            last = (pa.Table.from_pylist(batch, schema=SCHEMA), tx.txn_id, result.sequence)
        elif kind in ("commit", "abort") and open_txns:
            context, tx = open_txns.pop(seed % len(open_txns))
            if kind == "commit":
                context.__exit__(None, None, None)
            else:
                tx.abort()
            model.states[tx.txn_id] = tx.state
        elif kind == "flush":
            client.flush(table)
        elif kind == "evict":
            harness.evict()
        elif kind == "retry" and last is not None and (
            last[1] == AUTOCOMMIT or model.states[last[1]] == "open"
        ):  # the acknowledgement was "lost": the same write again, same sequence number
            data, txn, sequence = last
            again = client.write(table, data, txn_id=txn, sequence=sequence)
            assert again.rows == 0 and again.duplicate_rows == data.num_rows, (step, again)
        elif kind == "restart":
            harness.restart(server)
        assert rows(client.read(table), COLUMNS) == model.latest(), (step, kind)
        assert rows(client.read(table, mode="committed"), COLUMNS) == model.committed(), (step, kind)
        check_key_filtered_reads(client, table, model, rng)
    for context, tx in open_txns:
        context.__exit__(None, None, None)
        model.states[tx.txn_id] = tx.state
    client.flush(table)
    expected = model.committed()
    assert rows(client.read(table), COLUMNS) == model.latest() == expected
    assert rows(HudiTable.open(path).read(), COLUMNS) == expected
    assert rows(hudi_rs_read(path), COLUMNS) == expected
    return model
