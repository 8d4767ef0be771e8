"""Streaming reads: ``spark.readStream.format("memtier")``, the table's committed changes
in commit order. An offset is a completed instant of the Hudi timeline; a micro-batch
reads the rows committed in (start, end] as an incremental read (one task per bucket),
so a restarted query resumes exactly at its checkpointed offset, and a consumer that
fell behind catches up from the Hudi files. Rows reach the source when a flush commits
them (``tableserver.flush-interval``); while a write is pending (a backfill), the feed
goes no further than the instants before it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from memtier.client import ReadRequest
from memtier.errors import InvalidArgumentError
from memtier.hudi.reader import normalize_instant
from memtier.hudi.tablemeta import TableMeta
from memtier.io import open_fileio
from memtier.spark.batch import PlanPart, plan_parts, read_part
from memtier.spark.connection import client_for
from memtier.spark.options import SourceOptions

__all__ = ["ChangeFeed", "EARLIEST"]

EARLIEST = "0" * 17


class ChangeFeed(DataSourceStreamReader):
    """Offsets ``{"instant": "yyyyMMddHHmmssSSS"}``; ``starting`` = earliest (the default),
    latest, or an instant (exclusive)."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        starting = (options.get("starting") or "earliest").lower()
        if starting not in ("earliest", "latest"):
            try:
                starting = normalize_instant(starting, "starting") or EARLIEST
            except InvalidArgumentError as e:
                raise InvalidArgumentError(f'option "starting" is earliest, latest or an instant: {e}') from e
        self.starting = starting

    def _latest(self) -> str:
        """The newest completed instant that no pending write precedes: a write still
        pending (a backfill, say) completes under its own, earlier instant, which a feed
        already past it would never read; so the feed waits for it, as Hudi's incremental
        reads wait for inflight commits."""
        description = client_for(self.options).describe(self.options.table)
        path = description["path"]
        timeline = TableMeta.load(open_fileio(path, description.get("storage_options") or None), path).timeline()
        first_pending = min((i.timestamp for i in timeline.pending(("deltacommit", "commit"))), default=None)
        settled = [i.timestamp for i in timeline.completed() if first_pending is None or i.timestamp < first_pending]
        return settled[-1] if settled else EARLIEST

    def initialOffset(self) -> dict[str, str]:  # noqa: N802 (Spark's names)
        if self.starting == "earliest":
            return {"instant": EARLIEST}
        return {"instant": self._latest() if self.starting == "latest" else self.starting}

    def latestOffset(self, start: Any = None, limit: Any = None) -> dict[str, str]:  # noqa: N802
        return {"instant": self._latest()}

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> list[PlanPart]:
        if end["instant"] <= start["instant"]:
            return []
        request = ReadRequest(self.options.table, "incremental", start=start["instant"], end=end["instant"])
        return plan_parts(self.options, request)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_part(self.options, partition, self.schema)

    def commit(self, end: dict[str, str]) -> None:
        """Nothing to give back: the files stay until cleaning's retention."""
