"""What a table server keeps of each table it serves (its file groups, WAL stream, locks
and schema), the columns and metadata its reads carry, and what a write acknowledgement reports."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from memtier.hudi.deletes import flagged_schema
from memtier.hudi.evolution import merge
from memtier.hudi.tablemeta import TableMeta
from memtier.tableserver.block import Block
from memtier.tableserver.filegroup import FileGroup, FileGroupKey
from memtier.wal import WalStream

#: Columns a block read carries besides the data: the rows' file group.
PARTITION_COLUMN = "__memtier_partition"
FILE_ID_COLUMN = "__memtier_file_id"
#: Schema metadata key of a read's answer holding rows of transactions its snapshot left
#: unresolved (see :meth:`TableServer.read`).
UNRESOLVED = b"memtier.unresolved"
UNRESOLVED_METADATA = {UNRESOLVED: b"1"}


@dataclass(frozen=True)
class WriteAck:
    """What a write acknowledgement reports."""

    rows: int  # rows appended (durable in the WAL, in memory)
    duplicate_rows: int  # rows of a retried write already held: dropped
    file_groups: int
    evicted_bytes: int  # memory freed to admit this write (back-pressure, never an error)

    def to_dict(self) -> dict[str, int]:
        return {
            "rows": self.rows,
            "duplicate_rows": self.duplicate_rows,
            "file_groups": self.file_groups,
            "evicted_bytes": self.evicted_bytes,
        }


@dataclass
class ServedTable:
    """One table as this server serves it (``name``: the cluster's name for it, which
    need not be the Hudi table name of a registered table)."""

    name: str
    meta: TableMeta
    stream: WalStream
    owned: set[int] = field(default_factory=set)
    groups: dict[FileGroupKey, FileGroup] = field(default_factory=dict)
    file_ids: dict[tuple[str, int], str] = field(default_factory=dict)  # from the Hudi table
    flushed: dict[FileGroupKey, int] = field(default_factory=dict)  # last block in the table
    flush_lock: threading.Lock = field(default_factory=threading.Lock)
    publish: threading.Lock = field(default_factory=threading.Lock)  # a flush's completion vs reads
    acknowledged: Tally = field(default_factory=lambda: Tally())
    #: The generation of the blocks opened now: the table's open blocks are sealed together
    #: (a write to several file groups is one record in the WAL stream that each of their
    #: blocks selects rows of, so a flush round taking whole generations reads each write
    #: once), and the next blocks are of the next generation.
    generation: int = 0
    open_bytes: int = 0  # bytes appended to the current generation
    generation_lock: threading.Lock = field(default_factory=threading.Lock)
    gone: bool = False  # no longer served here (given up, or lost with a fenced life)

    def open_blocks(self) -> list[Block]:
        """Its blocks still open (one per file group at most)."""
        return [g.blocks[-1] for g in list(self.groups.values()) if g.blocks and not g.blocks[-1].sealed]

    _stored: tuple[TableMeta, pa.Schema] | None = None
    _fitting: tuple[TableMeta, pa.Schema] | None = None

    @property
    def stored_schema(self) -> pa.Schema:
        """The schema of the rows it writes into memory and the WAL now (blocks written
        under an older schema keep theirs)."""
        return self.stored_for(self.meta)

    def stored_for(self, meta: TableMeta) -> pa.Schema:
        """The schema rows written under ``meta`` are stored with: its physical schema,
        delete flag last (made once per schema)."""
        known = self._stored
        if known is None or known[0] is not meta:
            known = self._stored = (meta, flagged_schema(meta.physical))
        return known[1]

    def fits(self, meta: TableMeta, schema: pa.Schema) -> bool:
        """Whether write batches of ``schema`` fit the table as ``meta`` has it (no column or
        type it lacks); the last such schema is remembered (most batches share one)."""
        if self._fitting is not None and self._fitting[0] is meta and self._fitting[1].equals(schema):
            return True
        if merge(meta.schema, schema, meta.roles)[1]:
            return False
        self._fitting = (meta, schema)
        return True

    def adopt(self, meta: TableMeta) -> None:
        """Write under ``meta``'s (newer) schema from now on; the caller holds every file
        group's lock and seals the open blocks."""
        self.meta = meta
        for group in self.groups.values():
            group.schema = self.stored_for(meta)


class SchemaMoved(Exception):
    """The table's schema changed while a write was prepared under the one before."""


@dataclass
class Tally:
    """Rows and bytes acknowledged so far; thread-safe."""

    rows: int = 0
    bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, rows: int, nbytes: int) -> None:
        with self._lock:
            self.rows += rows
            self.bytes += nbytes


@contextlib.contextmanager
def all_held(locks: Sequence[threading.Lock]) -> Iterator[None]:
    """Hold every lock of ``locks`` (taken in this order) for the block; one context for
    them all (an exit stack spent ~1.5 us a lock)."""
    taken = 0
    try:
        for lock in locks:
            lock.acquire()
            taken += 1
        yield
    finally:
        for lock in reversed(locks[:taken]):
            lock.release()
