"""The table server core: blocks of the file groups it owns, in memory and in WAL files.

Plain Python, no Ray: :mod:`memtier.cluster` wraps it in an actor, tests drive it
directly. Writes are validated, appended to the table's WAL stream (a frame per file
group's open block; durable on return, one sync shared by every file group of the write and
by concurrent writers), then to memory, then acknowledged. Sealed blocks of resolved transactions flush into Hudi log files through
the master, which owns the timeline. Memory is bounded: sealed blocks are evicted (their
rows stay in the WAL) and read back when a reader or a flush needs them.

Its jobs live in their own modules: what it keeps of a table (:mod:`~memtier.tableserver.tables`),
its state, buckets and memory (:mod:`~memtier.tableserver.base`), writes (:mod:`~memtier.tableserver.writes`),
reads (:mod:`~memtier.tableserver.reads`), flushes and WAL retention
(:mod:`~memtier.tableserver.flushes`); this module joins them and talks to the master.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from memtier.errors import FencedError
from memtier.hudi.deletes import DELETE_FLAG
from memtier.hudi.filenames import bucket_or_none
from memtier.latency import LatencyWindow
from memtier.tableserver.flushes import Flushes
from memtier.tableserver.reads import Reads
from memtier.tableserver.tables import (
    FILE_ID_COLUMN,
    PARTITION_COLUMN,
    UNRESOLVED,
    UNRESOLVED_METADATA,
    WriteAck,
)
from memtier.tableserver.writes import Writes

__all__ = ["DELETE_FLAG", "FILE_ID_COLUMN", "PARTITION_COLUMN", "UNRESOLVED", "UNRESOLVED_METADATA", "TableServer", "WriteAck"]


class TableServer(Writes, Reads, Flushes):
    """Blocks of the buckets this server owns, for every table; thread-safe."""

    def join(self, location: str) -> None:
        """Register with the master as this life, serving at ``location``; a life the
        master fenced meanwhile is left first (:meth:`reset`)."""
        life = self.life
        try:
            self._master.register_server(self.server_id, location, self.config.memory_budget,
                                         self.config.max_batch_rows, life=life)
        except FencedError:
            self.reset(life)
            self._master.register_server(self.server_id, location, self.config.memory_budget,
                                         self.config.max_batch_rows, life=self.life)

    def heartbeat(self, location: str, extra: Mapping[str, Any] | None = None) -> None:
        """Report this life's status (with ``extra``) to the master. Not registered (the
        master restarted, or took this server for dead): register again, after a reset if
        the master says this life was fenced (its first heartbeat after waking from a
        pause tells it so)."""
        life = self.life
        reply = self._master.heartbeat(self.server_id, {**self.status(), **(extra or {})},
                                       self.bucket_memory(), life=life)
        if reply.get("registered"):
            for table, version in (reply.get("schemas") or {}).items():  # changes it missed hearing of
                self.apply_schema(table, int(version))
            return
        if reply.get("fenced"):
            self.reset(life)
        self.join(location)

    def status(self) -> dict[str, Any]:
        """Memory, blocks, write acknowledgement times and how far each table's unflushed
        data lags."""
        now = time.monotonic()
        with self._lock:
            tables = list(self._tables.values())
        report = {}
        for t in tables:
            blocks = [b for g in list(t.groups.values()) for b in list(g.blocks)]
            unflushed = [b for b in blocks if b.flushed_instant is None]
            report[t.name] = {
                "buckets": sorted(t.owned),
                "file_groups": len(t.groups),
                "blocks": len(blocks),
                "resident_blocks": sum(1 for b in blocks if b.resident),
                "unflushed_blocks": len(unflushed),
                "unflushed_rows": sum(b.rows for b in unflushed),
                "unflushed_bytes": sum(b.nbytes for b in unflushed),
                "oldest_unflushed_s": max((now - b.created for b in unflushed), default=0.0),
                "memory_bytes": sum(b.memory for b in blocks),
                "acknowledged_rows": t.acknowledged.rows,
                "acknowledged_bytes": t.acknowledged.bytes,
            }
        return {
            "server_id": self.server_id,
            "life": self.life,
            "memory_used": self.memory.used,
            "memory_peak": self.memory.peak,
            "memory_budget": self.memory.budget,
            "wal": vars(self._committer.stats()),
            "writes": self.write_latency.summary(),
            "reads": self.read_latency.summary(),
            "wal_syncs": self._committer.sync_latency.summary(),
            "flushes": self.flush_latency.summary(),
            "gc_pauses": self.gc_pauses.summary(),
            "metrics_url": self.metrics_url,
            "tables": report,
        }

    def latencies(self) -> dict[str, LatencyWindow]:
        """The durations this server measures, by what they time."""
        return {"ack": self.write_latency, "read": self.read_latency, "wal_sync": self._committer.sync_latency,
                "flush": self.flush_latency, "gc": self.gc_pauses}

    def bucket_memory(self) -> dict[tuple[str, int], int]:
        """Bytes held per (table, bucket): what the master balances on."""
        held: dict[tuple[str, int], int] = {}
        for t, group, block in self._blocks():
            bucket = bucket_or_none(group.key.file_id)
            if bucket is not None:
                held[(t.name, bucket)] = held.get((t.name, bucket), 0) + block.memory
        return held

    def close(self) -> None:
        """Release every WAL file (open blocks stay in the WAL stream unsealed; a restart
        recovers them)."""
        self._closed = True
        self._retention.shutdown(wait=True)
        with self._lock:
            tables = list(self._tables.values())
        for t in tables:
            t.stream.close()
        self._committer.close()
        self.flusher.close()
