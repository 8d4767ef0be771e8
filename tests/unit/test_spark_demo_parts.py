"""The Spark demo's own logic, without Spark: which rows a micro-batch's progress says it
wrote and when Spark completed it."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from memtier.spark_demo import MicroBatch


def _progress(start: object, end: object, rows: int = 100) -> SimpleNamespace:
    """A query progress as PySpark reports it (the offsets as the JSON Spark writes)."""
    source = SimpleNamespace(startOffset=start, endOffset=end)
    return SimpleNamespace(batchId=3, numInputRows=rows, timestamp="2026-11-27T19:47:07.349Z",
                           durationMs={"triggerExecution": 965, "addBatch": 414}, sources=[source])


def test_a_micro_batch_is_the_rate_sources_values_between_its_offsets_done_at_its_triggers_end() -> None:
    batch = MicroBatch.of(_progress('{"offset": 2000, "timestamp": 1000}', '{"offset": 4000, "timestamp": 2000}'))
    started = datetime(2026, 11, 27, 19, 47, 7, 349000, tzinfo=UTC).timestamp()
    assert batch is not None
    assert (batch.batch_id, batch.first, batch.end, batch.rows) == (3, 2000, 4000, 2000)
    assert batch.seconds == pytest.approx(0.965)
    assert batch.done_at == pytest.approx(started + 0.965)


@pytest.mark.parametrize("start", [None, "None", "null"])
def test_the_first_micro_batch_starts_at_zero(start: object) -> None:
    batch = MicroBatch.of(_progress(start, '{"offset": 500}'))
    assert batch is not None and (batch.first, batch.end) == (0, 500)


def test_a_micro_batch_without_rows_is_none() -> None:
    assert MicroBatch.of(_progress('{"offset": 500}', '{"offset": 500}', rows=0)) is None
