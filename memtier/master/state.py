"""The master's persistent state: a frozen value, pure updates, one versioned JSON file.

Everything the master must remember across a restart lives here: the catalog, the
transaction table and the bucket assignment. Table servers, heartbeats and in-flight
flushes are not persisted: servers re-register, and the timeline itself says which
flushes completed (pending ones are rolled back on start).

Table servers are remembered by their current *life* (a random token each process, and
each reset after being taken for dead, starts with: :mod:`memtier.wal.fence`), and the
lives fenced lately are remembered too, so a server that wakes up from a pause learns
from its first heartbeat that it lost its buckets.

Transaction visibility needs no list of committed ids: ids are allocated in order, so a
transaction is committed when it is below ``next_txn`` and neither open nor aborted.
Resolved transactions are kept a while only so a retried begin finds its id again.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from memtier.errors import CorruptFileError, NotFoundError
from memtier.exchange import TxnSnapshot
from memtier.io import FileIO
from memtier.jsonfile import decode

__all__ = [
    "MasterState",
    "MasterStore",
    "TableEntry",
    "Txn",
]

FORMAT = "memtier-master-state"
#: 2: table servers' lives and fenced lives; 3: table options (versions 1 and 2 are read:
#: they have neither, or no options)
VERSION = 3
#: How many fenced lives the state remembers (a server waking after more fences than
#: this is still stopped by the WAL fence itself, at its first write).
KEEP_FENCED = 1024

OPEN, COMMITTED, ABORTED = "open", "committed", "aborted"


def _frozen(mapping: Mapping[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class TableEntry:
    """A table in the catalog: where its Hudi table lives."""

    name: str
    path: str
    storage_options: Mapping[str, str] = field(default_factory=dict)
    created_ms: int = 0
    services: Mapping[str, str] = field(default_factory=dict)  # the table's ``services.*`` settings
    options: Mapping[str, str] = field(default_factory=dict)  # the table's options (``schema.evolution``)


@dataclass(frozen=True)
class Txn:
    """One transaction; ``(writer, batch)`` makes its id stable across retries."""

    txn_id: int
    table: str
    writer: str
    batch: str
    state: str  # open | committed | aborted
    began_ms: int
    ended_ms: int | None = None



@dataclass(frozen=True)
class MasterState:
    tables: Mapping[str, TableEntry] = field(default_factory=dict)
    next_txn: int = 1
    txns: Mapping[int, Txn] = field(default_factory=dict)
    assignments: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    epoch: int = 0  # bumped by every assignment change
    lives: Mapping[str, str] = field(default_factory=dict)  # table server id -> its current life
    fenced: tuple[str, ...] = ()  # lives fenced lately, oldest first

    # -- pure updates -----------------------------------------------------------------
    def with_table(self, entry: TableEntry) -> MasterState:
        return dataclasses.replace(self, tables=_frozen({**self.tables, entry.name: entry}))

    def without_table(self, name: str) -> MasterState:
        tables = {k: v for k, v in self.tables.items() if k != name}
        assignments = {k: v for k, v in self.assignments.items() if k != name}
        return dataclasses.replace(
            self, tables=_frozen(tables), assignments=_frozen(assignments), epoch=self.epoch + 1
        )

    def with_txn(self, txn: Txn) -> MasterState:
        next_txn = max(self.next_txn, txn.txn_id + 1)
        return dataclasses.replace(
            self, txns=_frozen({**self.txns, txn.txn_id: txn}), next_txn=next_txn
        )

    def with_assignment(self, table: str, buckets: Mapping[int, str]) -> MasterState:
        assignments = {**self.assignments, table: _frozen(buckets)}
        return dataclasses.replace(self, assignments=_frozen(assignments), epoch=self.epoch + 1)

    def with_life(self, server_id: str, life: str) -> MasterState:
        """``server_id`` registered as ``life``."""
        return dataclasses.replace(self, lives=_frozen({**self.lives, server_id: life}))

    def with_fenced(self, life: str) -> MasterState:
        """``life`` was fenced: it owns nothing any more, whoever says otherwise."""
        if life in self.fenced:
            return self
        return dataclasses.replace(self, fenced=(*self.fenced, life)[-KEEP_FENCED:])

    def pruned(self, now_ms: int, keep_committed_ms: int, keep_aborted_ms: int) -> MasterState:
        """Forget resolved transactions past their keep time (open ones always stay)."""

        def keep(txn: Txn) -> bool:
            if txn.state == OPEN or txn.ended_ms is None:
                return True
            limit = keep_aborted_ms if txn.state == ABORTED else keep_committed_ms
            return now_ms - txn.ended_ms < limit

        txns = {i: t for i, t in self.txns.items() if keep(t)}
        if len(txns) == len(self.txns):
            return self
        return dataclasses.replace(self, txns=_frozen(txns))

    # -- queries ----------------------------------------------------------------------
    def snapshot(self) -> TxnSnapshot:
        open_ids = frozenset(i for i, t in self.txns.items() if t.state == OPEN)
        aborted = frozenset(i for i, t in self.txns.items() if t.state == ABORTED)
        return TxnSnapshot(self.next_txn, open_ids, aborted)

    def find_txn(self, table: str, writer: str, batch: str) -> Txn | None:
        for txn in self.txns.values():
            if (txn.table, txn.writer, txn.batch) == (table, writer, batch):
                return txn
        return None

    # -- encoding ---------------------------------------------------------------------
    def to_json(self) -> bytes:
        body = {
            "format": FORMAT,
            "version": VERSION,
            "tables": [dataclasses.asdict(t) for t in self.tables.values()],
            "next_txn": self.next_txn,
            "txns": [dataclasses.asdict(t) for t in self.txns.values()],
            "assignments": {
                table: {str(b): s for b, s in buckets.items()}
                for table, buckets in self.assignments.items()
            },
            "epoch": self.epoch,
            "lives": dict(self.lives),
            "fenced": list(self.fenced),
        }
        return json.dumps(body, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, path: str) -> MasterState:
        body = decode(data, path, FORMAT, (1, 2, VERSION), "master state")
        try:
            tables = {t["name"]: TableEntry(**t) for t in body["tables"]}
            txns = {t["txn_id"]: Txn(**t) for t in body["txns"]}
            assignments = {
                table: _frozen({int(b): s for b, s in buckets.items()})
                for table, buckets in body["assignments"].items()
            }
            return cls(
                _frozen(tables), int(body["next_txn"]), _frozen(txns), _frozen(assignments),
                int(body["epoch"]), _frozen({str(s): str(life) for s, life in body.get("lives", {}).items()}),
                tuple(str(life) for life in body.get("fenced", ())),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CorruptFileError(path, 0, f"master state is missing or mangles a field: {e!r}") from e


class MasterStore:
    """Loads and durably saves the master state as one file (atomic replace)."""

    def __init__(self, io: FileIO, path: str) -> None:
        self.io = io
        self.path = path

    def load(self) -> MasterState:
        try:
            data = self.io.read_bytes(self.path)
        except NotFoundError:
            return MasterState()
        return MasterState.from_json(data, self.path)

    def save(self, state: MasterState) -> None:
        self.io.write_atomic(self.path, state.to_json())
