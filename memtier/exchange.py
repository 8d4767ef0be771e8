"""What the master and the table servers exchange: the transaction snapshot a read is
fixed at, where a table's files live, the last block a flush wrote of a file group. It sits
below :mod:`memtier.master` and :mod:`memtier.tableserver`, so neither imports the other."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AUTOCOMMIT", "FlushedBlock", "TableLocation", "TxnSnapshot"]

#: The transaction id of writes outside any transaction: committed when acknowledged.
AUTOCOMMIT = 0


@dataclass(frozen=True)
class TxnSnapshot:
    """Which transactions a reader sees as committed, fixed at one moment for every server."""

    next_txn: int
    open: frozenset[int] = frozenset()
    aborted: frozenset[int] = frozenset()

    def committed(self, txn_id: int) -> bool:
        if txn_id == AUTOCOMMIT:
            return True
        return txn_id < self.next_txn and txn_id not in self.open and txn_id not in self.aborted

    def visible(self, txn_id: int, *, committed_only: bool) -> bool:
        """Whether a reader sees rows of ``txn_id``: committed readers only committed
        ones; latest readers every transaction not aborted (open ones too)."""
        if committed_only:
            return self.committed(txn_id)
        return txn_id not in self.aborted

    def resolved(self, txn_id: int) -> bool:
        """Committed or aborted: a block holding only resolved transactions may flush."""
        return txn_id == AUTOCOMMIT or (txn_id < self.next_txn and txn_id not in self.open)

    def to_dict(self) -> dict[str, Any]:
        return {"next_txn": self.next_txn, "open": sorted(self.open), "aborted": sorted(self.aborted)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TxnSnapshot:
        return cls(int(data["next_txn"]), frozenset(data["open"]), frozenset(data["aborted"]))


@dataclass(frozen=True)
class TableLocation:
    """Where a table's Hudi files live."""

    name: str
    path: str
    storage_options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FlushedBlock:
    """The last block of a file group a flush wrote (all earlier ones are in it too)."""

    partition: str
    file_id: str
    block_id: int

    def to_list(self) -> list[Any]:
        return [self.partition, self.file_id, self.block_id]

    @classmethod
    def from_list(cls, item: Sequence[Any]) -> FlushedBlock:
        return cls(str(item[0]), str(item[1]), int(item[2]))
