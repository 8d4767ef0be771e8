"""The read path of a table server: its unflushed rows of a table at a transaction snapshot,
from memory or read back from the WAL, filtered by key through each block's key index."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from memtier.errors import FencedError, NotOwnerError
from memtier.exchange import TxnSnapshot
from memtier.hudi.deletes import DELETE_FLAG
from memtier.hudi.evolution import project
from memtier.hudi.filenames import bucket_or_none
from memtier.hudi.filters import Filter, pinned_values, validate
from memtier.hudi.keyread import KeyFilter
from memtier.tableserver.base import ServerBase
from memtier.tableserver.block import Block, Frame, frames_of
from memtier.tableserver.filegroup import FileGroup, FileGroupKey, in_write_order
from memtier.tableserver.tables import FILE_ID_COLUMN, PARTITION_COLUMN, UNRESOLVED_METADATA


class Reads(ServerBase):
    """Reads of the blocks of a :class:`~memtier.tableserver.server.TableServer`."""

    def read(
        self,
        table: str,
        *,
        as_of_instant: str | None,
        pending: Collection[str] = (),
        snapshot: TxnSnapshot | None = None,
        committed_only: bool = False,
        columns: list[str] | None = None,
        buckets: Iterable[int] | None = None,
        key_filters: Sequence[Filter] = (),
        schema_version: int | None = None,
    ) -> pa.Table:
        """Rows of this server's blocks that the Hudi table lacks as of ``as_of_instant``
        (None: a table with no commits) for a reader that saw the instants up to it in
        ``pending`` still pending, in write order per file group, with the file
        group in two extra columns, and the delete flag of each row (:data:`DELETE_FLAG`).
        Rows of transactions the ``snapshot`` says are aborted are left out, and with
        ``committed_only`` those not committed in it. ``key_filters`` (on record-key
        columns only) keep the rows of the keys they pass.

        The answer's schema metadata holds :data:`UNRESOLVED` when rows of the keys
        asked for belong to transactions the ``snapshot`` has open or does not know yet,
        shown or not (their outcome may have changed since it was taken: a reader that
        reused an old snapshot asks the master for a new one). Buckets this server does not serve
        (any more) raise :class:`NotOwnerError`, not an empty answer, as does a read planned
        under an older ``schema_version`` of the table than this server writes (the rows
        are those of the table's schema then: blocks written under an older one read up to it)."""
        started = time.perf_counter()
        t = self._table(table)
        checked = validate(key_filters, t.meta.config.record_key_fields)
        pinned = pinned_values(checked)  # frames holding none of them are skipped
        wanted = set(buckets) if buckets is not None else None
        if wanted is not None:
            self._check_owned(t, wanted)
        unresolved = False
        batches, partitions, file_ids = [], [], []
        with t.publish:  # a flush completing now: its blocks are flushed or not, as for the plan
            held = [
                (group, blocks)
                for key in sorted(t.groups)
                if wanted is None or bucket_or_none(key.file_id) in wanted
                for group in (t.groups[key],)
                if (blocks := [b for b in list(group.blocks) if b.missing_from(as_of_instant, pending)])
            ]
        missing = [(key, block) for key, blocks in _as_one_per_bucket(in_write_order(held)) for block in blocks]
        meta = t.meta  # (after the blocks: each was written under it or an older schema)
        if schema_version is not None and schema_version != meta.schema_version:
            if schema_version > meta.schema_version:  # a reader that heard of a change before this server
                meta = self._refresh_schema(t)
            if meta.schema_version > schema_version:
                raise NotOwnerError(f"the schema of table {table!r} changed (version {meta.schema_version}, the "
                                    f"read's {schema_version}): plan the read again")
        stored = t.stored_for(meta)
        names = list(columns) if columns is not None else list(meta.physical.names)
        names = names if DELETE_FLAG in names else [*names, DELETE_FLAG]
        schema = pa.schema([stored.field(n) for n in names])
        evicted = [block for _, block in missing if not block.resident]  # read back in one pass
        read_back = dict(zip(map(id, evicted), frames_of(evicted) if evicted else [], strict=True))
        for key, block in missing:
            current = block.header.schema.equals(stored)
            for frame, rows in _frames_of_keys(block, pinned, read_back.get(id(block))):
                if snapshot is not None and not snapshot.resolved(frame.txn_id):
                    unresolved = True  # shown (latest) or hidden (committed): either may change
                if snapshot is not None and not snapshot.visible(
                    frame.txn_id, committed_only=committed_only
                ):
                    continue
                batches.append(frame.rows_of(names, rows) if current else _read_up(frame, rows, schema))
                partitions.append((key.partition, batches[-1].num_rows))
                file_ids.append((key.file_id, batches[-1].num_rows))
        data = pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
        data = data.append_column(PARTITION_COLUMN, _repeated(partitions)).append_column(
            FILE_ID_COLUMN, _repeated(file_ids)
        )
        keys = KeyFilter.of(checked)  # not acero's filter: it costs ~0.1 ms a frame
        data = data if keys is None else keys.filter(data)
        if t.stream.fenced():  # another server may serve newer writes of these buckets
            self.reset(t.stream.life)
            raise FencedError(f"table server {self.server_id} lost the buckets of {table!r} to another; "
                              "refresh the routing and read again")
        self.read_latency.add(time.perf_counter() - started)
        return data.replace_schema_metadata(UNRESOLVED_METADATA) if unresolved else data


def _as_one_per_bucket(runs: list[tuple[FileGroup, list[Block]]]) -> list[tuple[FileGroupKey, list[Block]]]:
    """``runs`` (in write order) each named by the file group its bucket's rows are read
    under: the one of its file groups written last. A reader merges the rows of a file
    group in the order given, so a bucket's rows held in several file groups (a clustering
    replaced one, or the bucket moved here from a server that wrote to another) must
    reach it as one, in write order: it puts them in the file group holding the bucket at
    its read point, whichever of the names that is (a delete read before the write it
    preceded would undo it). Blocks of file groups outside buckets keep their own."""
    last = {(g.key.partition, bucket): g.key for g, _ in runs if (bucket := bucket_or_none(g.key.file_id)) is not None}
    return [(last.get((g.key.partition, bucket_or_none(g.key.file_id)), g.key), blocks) for g, blocks in runs]


def _frames_of_keys(
    block: Block, pinned: Mapping[str, list[Any]], read_back: list[Frame] | None
) -> list[tuple[Frame, np.ndarray | None]]:
    """The block's durable frames a read filtered on ``pinned`` key values needs, with
    the rows holding them (None: the whole frame, to be filtered): through the block's
    key index when it is in memory, else every frame whose key range may hold them
    (``read_back``: its frames, read back from the WAL with other evicted blocks')."""
    found = block.key_frames(pinned) if pinned else None
    if found is not None:
        return [(frame, rows) for frame, rows in found]
    frames = block.frames() if read_back is None else read_back
    return [(f, None) for f in frames if all(f.may_hold(c, v) for c, v in pinned.items())]


def _read_up(frame: Frame, rows: np.ndarray | None, schema: pa.Schema) -> pa.RecordBatch:
    """The ``rows`` of a frame of a block written under an older schema, read up to
    ``schema``: the columns it lacks are null."""
    held = frame.source.schema.names
    return project(frame.rows_of([n for n in schema.names if n in held], rows), schema)


def _repeated(runs: list[tuple[str, int]]) -> pa.DictionaryArray:
    """A dictionary column repeating each value for its run of rows."""
    values = list(dict.fromkeys(v for v, _ in runs))
    index = {v: i for i, v in enumerate(values)}
    codes = np.repeat(
        np.array([index[v] for v, _ in runs], dtype=np.int32),
        np.array([n for _, n in runs], dtype=np.int64),
    )
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(values, pa.string()))
