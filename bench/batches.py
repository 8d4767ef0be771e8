"""The shared ingest workload: deterministic 5-column batches and how a run over them is scored.

Imported by the project venv (memtier, ceiling) and by the peer venv (deltalake, pypaimon,
pyarrow<20), so it needs nothing but numpy and pyarrow (through ``bench.common``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from bench.common import bench_table

__all__ = ["arrow_bytes", "digest", "last_key", "make_batches", "percentiles_ms", "summarize"]


def make_batches(count: int, rows: int, *, seed: int = 0) -> list[pa.RecordBatch]:
    """``count`` batches; batch i holds keys ``[i*rows, (i+1)*rows)`` and ts ``i+1``."""
    return [_batch(i, rows, seed) for i in range(count)]


def last_key(batch: pa.RecordBatch) -> int:
    """The key of a batch's last row: the row a reader waits for to call the batch visible."""
    return int(batch.column("key")[-1].as_py())


def arrow_bytes(batches: Sequence[pa.RecordBatch]) -> int:
    """Logical Arrow size of the batches: the byte count every MB/s figure is based on."""
    return sum(b.nbytes for b in batches)


def digest(batches: Sequence[pa.RecordBatch]) -> str:
    """A content hash independent of pyarrow version, to prove two venvs wrote the same rows."""
    h = hashlib.sha256()
    for batch in batches:
        for column in batch.columns:
            if pa.types.is_string(column.type):
                h.update("\n".join(column.to_pylist()).encode())
            else:
                h.update(column.to_numpy(zero_copy_only=False).tobytes())
    return h.hexdigest()[:16]


def summarize(
    name: str,
    batches: Sequence[pa.RecordBatch],
    seconds: float,
    acks_s: Sequence[float],
    **extra: Any,
) -> dict[str, Any]:
    """Result dict of one system: rows/s and MB/s over ``seconds``; per-batch ack latency p50/p99.

    A batch's ack latency runs from handing it over to getting its acknowledgement (for a
    table format: the commit call returning).
    """
    rows = sum(b.num_rows for b in batches)
    nbytes = arrow_bytes(batches)
    return {
        "system": name,
        "batches": len(batches),
        "rows": rows,
        "arrow_mb": round(nbytes / 1e6, 2),
        "seconds": round(seconds, 3),
        "rows_per_s": round(rows / seconds),
        "mb_per_s": round(nbytes / 1e6 / seconds, 1),
        **percentiles_ms("ack", acks_s),
        **extra,
    }


def percentiles_ms(label: str, seconds: Sequence[float]) -> dict[str, float]:
    """``{label}_p50_ms`` and ``{label}_p99_ms`` of durations given in seconds."""
    values = np.asarray(seconds, dtype=float) * 1000.0
    return {
        f"{label}_p50_ms": round(float(np.percentile(values, 50)), 2),
        f"{label}_p99_ms": round(float(np.percentile(values, 99)), 2),
    }


def _batch(index: int, rows: int, seed: int) -> pa.RecordBatch:
    keys = np.arange(index * rows, (index + 1) * rows, dtype=np.int64)
    table = bench_table(rows, seed=seed * 1_000_003 + index, keys=keys, ts=index + 1)
    return table.combine_chunks().to_batches()[0]
