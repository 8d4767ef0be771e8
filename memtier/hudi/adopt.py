"""Taking over a table Apache Hudi wrote: what memtier refuses, and whether its file groups
already form a bucket index.

memtier routes every row to the file group of its bucket (Hudi's simple bucket index), so a
table Hudi wrote with its default index (simple or bloom: file groups under random ids) is
converted once, by a clustering of the table-service pool that rewrites each partition into
one file group per bucket (a ``replacecommit`` every Hudi reader understands; see
:mod:`memtier.compaction.cluster`); until it completes the table is read as it was and the
tier takes no writes. Refused, with what to do: a consistent-hashing bucket index (its
buckets split and merge; memtier's count is fixed), pending table services or other
instants memtier cannot roll back, and a copy-on-write table a Hudi writer is writing.
"""

from __future__ import annotations

from memtier.errors import UnsupportedTableError
from memtier.hudi.filenames import bucket_or_none
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.properties import TIMELINE_HISTORY_PATH
from memtier.hudi.tablemeta import TableMeta
from memtier.hudi.timeline import timeline_dir
from memtier.io import join

__all__ = ["check_adoptable", "drop_empty_history", "fits_buckets"]

#: Pending instants memtier rolls back itself when it takes a table (a writer that died).
_ROLLED_BACK = ("commit", "deltacommit")
_ENGINE = "hoodie.index.bucket.engine"


def check_adoptable(meta: TableMeta) -> None:
    """Refuse, naming what to do, a table memtier cannot take over."""
    where = f"table {meta.config.name} at {meta.base_path}"
    engine = meta.config.raw.get(_ENGINE, "").strip().upper()
    if engine == "CONSISTENT_HASHING" or meta.io.exists(join(meta.base_path, ".hoodie", ".bucket_index")):
        raise UnsupportedTableError(
            f"{where} has a consistent-hashing bucket index, whose buckets split and merge; memtier keeps a"
            " fixed bucket count: rewrite it with Hudi's simple bucket engine (hoodie.index.bucket.engine=SIMPLE)"
            " or its default index first"
        )
    pending = meta.timeline().pending(None)
    others = [i for i in pending if i.action not in _ROLLED_BACK and i.action != "rollback"]
    if others:
        names = ", ".join(f"{i.action} {i.timestamp} ({i.state.value})" for i in others)
        raise UnsupportedTableError(
            f"{where} has pending instants memtier cannot roll back: {names}; complete them with Hudi"
            " (run the compaction or clustering) or roll them back (CALL rollback_to_instant) first"
        )
    if not meta.is_merge_on_read and pending:
        names = ", ".join(f"{i.action} {i.timestamp}" for i in pending)
        raise UnsupportedTableError(
            f"{where} is copy-on-write and a Hudi writer is writing it ({names} pending): stop that writer"
            " (or let it finish) first; memtier would roll its commit back"
        )


def fits_buckets(view: FileSystemView, buckets: int) -> bool:
    """Whether every file group is the one file group of a bucket below ``buckets`` in
    its partition (a bucket-index layout of that count)."""
    seen: set[tuple[str, int]] = set()
    for partition, file_id in view.file_groups:
        bucket = bucket_or_none(file_id)
        if bucket is None or bucket >= buckets or (partition, bucket) in seen:
            return False
        seen.add((partition, bucket))
    return True


def drop_empty_history(meta: TableMeta) -> bool:
    """Remove the empty timeline history folder (``.hoodie/timeline/history``) Hudi 1.x
    creates with a table and fills only when it archives; whether there was one.

    Trino 476's Hudi connector fails on an adopted table that has it ("Could not load
    archived commit timeline from path .../history": it reads an empty history as a
    broken one), and reads the table once it is gone. Hudi reads a missing folder as an
    empty history (memtier's own tables of version 8 and 9 have none; Hudi 1.x reads and
    writes them) and creates it again when it first archives."""
    if meta.layout != 2:
        return False
    folder = join(timeline_dir(meta.base_path, 2), meta.config.raw.get(TIMELINE_HISTORY_PATH) or "history")
    if not meta.io.exists(folder) or meta.io.list_dir(folder):
        return False
    meta.io.delete_dir(folder)
    return True
