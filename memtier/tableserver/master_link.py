"""What a table server needs from the master: a small protocol, so the server core runs
against the master object in-process (tests) or over RPC (the cluster) alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from memtier.exchange import FlushedBlock, TableLocation, TxnSnapshot

__all__ = ["MasterLink"]




class MasterLink(Protocol):
    """The master's calls a table server makes."""

    def register_server(self, server_id: str, location: str, memory_budget: int,
                        max_batch_rows: int | None = None, *, life: str) -> None:
        """Join as ``life``; :class:`~memtier.errors.FencedError` if that life was fenced."""
        ...

    def heartbeat(self, server_id: str, status: Mapping[str, Any],
                  bucket_memory: Mapping[tuple[str, int], int] | None = None, *,
                  life: str) -> dict[str, Any]:
        """``registered`` (false: register again) and ``fenced`` (reset first)."""
        ...

    def table_location(self, table: str) -> TableLocation: ...

    def txn_snapshot(self) -> TxnSnapshot: ...

    def flushed_blocks(self, table: str) -> list[FlushedBlock]:
        """The last flushed block of every file group, from the timeline."""
        ...

    def begin_commit(self, table: str, action: str, *, owner: str,
                     file_groups: Sequence[tuple[str, str]] = (), plan: bytes = b"",
                     life: str | None = None) -> str:
        """A new instant (requested on the timeline); see :meth:`Master.begin_commit`."""
        ...

    def commit_inflight(self, table: str, instant: str, planned: bytes = b"",
                        file_groups: Sequence[tuple[str, str]] = (), *, life: str | None = None) -> None:
        """Mark the instant inflight; ``planned`` is the commit metadata naming its files."""
        ...

    def complete_flush(
        self, table: str, instant: str, stats: Sequence[Mapping[str, Any]], flushed: Sequence[FlushedBlock],
        *, life: str | None = None,
    ) -> None:
        """Complete a flush; refused once ``life`` lost its buckets (:class:`FencedError`)."""
        ...

    def abort_commit(self, table: str, instant: str) -> None: ...
