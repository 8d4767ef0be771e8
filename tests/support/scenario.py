"""The write-tier scenario suite: random interleavings of writes, transactions, flushes,
evictions, table-server restarts and retried writes, checked after every step against a
model. The same driver runs against the in-process core (tests/support/inprocess.py) and
against real Ray actors, through a small :class:`Harness` each provides.

A key's visible version is its greatest ordering value, the later write winning ties,
wherever the versions sit (memory, WAL, base file, log file); a delete with an ordering
value is such a version (the key is hidden while it wins), a delete without one (or with
Hudi's zero) ends every version written before it. Hudi's merge of a key deleted that way and then re-inserted
with an ordering value below a version in its base file depends on the file layout
(docs/interoperability.md, "Rows merge as Hudi merges them"), so the scenarios never write one: after such
a delete, a key's ordering values do not go below those it had.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from memtier.client import Client
from memtier.hudi import HudiTable
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.waiting import wait_until

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("p", pa.string()), ("v", pa.string())])
COLUMNS = SCHEMA.names
DELETED = "_hoodie_is_deleted"
FLAGGED = SCHEMA.append(pa.field(DELETED, pa.bool_()))
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
    """Every acknowledged write, in order, with its transaction; a row with
    ``_hoodie_is_deleted`` deletes its key (in commit order when its ``ts`` is None)."""

    writes: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    states: dict[int, str] = field(default_factory=lambda: {AUTOCOMMIT: "committed"})
    keyless: bool = False  # an append-only table: every row stays

    def add(self, txn: int, batch: list[dict[str, Any]]) -> None:
        self.writes.extend((txn, row) for row in batch)

    def _view(self, visible: set[str]) -> list[tuple]:
        if self.keyless:
            return sorted(
                (tuple(r[c] for c in COLUMNS) for txn, r in self.writes if self.states.get(txn, "open") in visible),
                key=lambda t: tuple(repr(v) for v in t),
            )
        best: dict[Hashable, tuple[Any, dict[str, Any]]] = {}  # id -> (ordering, row)
        for txn, row in self.writes:
            if self.states.get(txn, "open") not in visible:
                continue
            current = best.get(row["id"])
            ordering = None if _in_commit_order(row) else row["ts"]
            if ordering is None or current is None or current[0] is None or ordering >= current[0]:
                best[row["id"]] = (ordering, row)
        return sorted(
            (tuple(r[c] for c in COLUMNS) for _, r in best.values() if not r.get(DELETED)),
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


def delete_rows(rng: random.Random, batch: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """``batch`` turned into deletes: ``flagged`` flags some rows (the rest stay upserts),
    ``delete`` deletes every key in commit order, ``odelete`` with the rows' ordering values."""
    if kind == "flagged":
        return [{**r, DELETED: rng.random() < 0.5} for r in batch]
    return [{"id": r["id"], "ts": r["ts"] if kind == "odelete" else None, "p": r["p"], "v": None, DELETED: True}
            for r in batch]


def _send_deletes(write: Any, delete: Any, kind: str, rows_: list[dict[str, Any]]) -> Any:
    if kind == "flagged":
        return write(pa.Table.from_pylist(rows_, schema=FLAGGED))
    keys = {"id": [r["id"] for r in rows_], "p": [r["p"] for r in rows_]}
    if kind == "odelete":
        keys["ts"] = [r["ts"] for r in rows_]
    return delete(pa.table(keys))


def _in_commit_order(row: dict[str, Any]) -> bool:
    """A delete without an ordering value, or with Hudi's zero, ends what came before it."""
    return bool(row.get(DELETED)) and not row["ts"]


def _keep_in_order(rows_: list[dict[str, Any]], floor: dict[int, int], model: TierModel) -> list[dict[str, Any]]:
    """``rows_`` (changed in place) such that after a delete in commit order a key takes no
    ordering value below one it had; ``floor`` keeps those least values between batches."""
    seen: dict[int, list[int]] = {}
    for row in rows_:
        key = row["id"]
        if _in_commit_order(row):
            had = [r["ts"] for _, r in model.writes if r["id"] == key and r["ts"] is not None]
            floor[key] = max([floor.get(key, 0), *had, *seen.get(key, [])])
        elif key in floor:
            row["ts"] = max(row["ts"], floor[key])
        if row["ts"] is not None:
            seen.setdefault(key, []).append(row["ts"])
    return rows_


def random_ops(rng: random.Random, steps: int, servers: int, *, deletes: bool = False) -> list[tuple[Any, ...]]:
    """A random scenario: each op a tuple (kind, args...); ``deletes`` mixes deletes in."""
    kinds = ["write"] * 6 + ["begin", "txwrite", "txwrite", "commit", "abort", "flush", "evict", "retry", "restart"]
    if deletes:
        kinds += ["delete", "odelete", "flagged", "flagged", "txdelete"]
    return [
        (kind, rng.randrange(1 << 30), rng.randrange(servers))
        for kind in (rng.choice(kinds) for _ in range(steps))
    ]


def check_key_filtered_reads(client: Client, table: str, model: TierModel, rng: random.Random) -> None:
    """Reads filtered on the record key (pushed to the table servers and before the merge,
    buckets and row groups pruned) and lookups equal the model's rows of those keys; a
    filter on another column as well still sees only each key's latest version."""
    keys = sorted(rng.sample(range(KEYS), 3))
    latest = model.latest()
    one = client.read(table, filters=[("id", "=", keys[0])])
    assert rows(one, COLUMNS) == [r for r in latest if r[0] == keys[0]]
    some = client.read(table, filters=[("id", "in", keys)])
    assert rows(some, COLUMNS) == [r for r in latest if r[0] in keys]
    assert rows(client.lookup(table, keys), COLUMNS) == [r for r in latest if r[0] in keys]
    old = client.read(table, filters=[("id", "in", keys), ("ts", "<", 2)])
    assert rows(old, COLUMNS) == [r for r in latest if r[0] in keys and r[1] < 2]


def check_filtered_reads(client: Client, table: str, model: TierModel, rng: random.Random) -> None:
    """An append-only table's reads filtered on a column equal the model's rows."""
    keys = sorted(rng.sample(range(KEYS), 3))
    found = client.read(table, filters=[("id", "in", keys), ("ts", "<", 3)])
    assert rows(found, COLUMNS) == [r for r in model.latest() if r[0] in keys and r[1] < 3]


def run_scenario(
    harness: Harness, table: str, path: str, ops: list[tuple[Any, ...]], *, keyless: bool = False,
    read_files: Callable[[str], pa.Table] = hudi_rs_read, table_version: int = 6,
) -> TierModel:
    """Apply ``ops``, checking read(latest) and read(committed) after each; at the end
    resolve every transaction, flush, and check memtier and another Hudi reader
    (``read_files``: hudi-rs by default) on the Hudi table. ``keyless``: the table is
    append-only (no record key), every acknowledged row stays. ``table_version``: the
    Hudi table version created (6, 8 or 9)."""
    client = harness.client
    client.create_table(table, SCHEMA, record_key=None if keyless else "id", ordering_field="ts",
                        partition_fields="p", buckets=4, path=path, table_version=table_version)
    model = TierModel(keyless=keyless)
    floor: dict[int, int] = {}  # keys deleted in commit order: the least ordering value they may take
    open_txns: list[Any] = []
    last: tuple[pa.Table, int, int] | None = None  # (batch, txn, sequence) of the last write
    for step, (kind, seed, server) in enumerate(ops):
        rng = random.Random(seed)
        batch = _keep_in_order(make_batch(rng, f"s{step}", rng.randrange(1, 12)), floor, model)
        if kind in ("delete", "odelete", "flagged"):
            deleted = _keep_in_order(delete_rows(rng, batch, kind), floor, model)
            _send_deletes(lambda d: client.write(table, d), lambda k: client.delete(table, k), kind, deleted)
            model.add(AUTOCOMMIT, deleted)
            last = None
        elif kind == "txdelete" and open_txns:
            _, tx = open_txns[seed % len(open_txns)]
            how = rng.choice(["delete", "odelete", "flagged"])
            deleted = _keep_in_order(delete_rows(rng, batch, how), floor, model)
            _send_deletes(tx.write, tx.delete, how, deleted)
            model.add(tx.txn_id, deleted)
            last = None
        elif kind == "write":
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
        (check_filtered_reads if keyless else check_key_filtered_reads)(client, table, model, rng)
    for context, tx in open_txns:
        context.__exit__(None, None, None)
        model.states[tx.txn_id] = tx.state
    client.flush(table)
    expected = model.committed()
    assert rows(client.read(table), COLUMNS) == model.latest() == expected
    assert rows(HudiTable.open(path).read(), COLUMNS) == expected
    # hudi-rs 0.5 reads a file group whose compaction is pending as it was when the
    # compaction was planned (it leaves out the logs flushed since, which Hudi on Spark and
    # memtier merge: tests/interop/test_pending_compaction.py), so it reads after the
    # table services settle
    wait_until(lambda: not client.status()["tables"][table]["services"]["tasks"],
               f"the table services of {table} to finish", timeout=180)
    assert rows(read_files(path), COLUMNS) == expected
    return model
