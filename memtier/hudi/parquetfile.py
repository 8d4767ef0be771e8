"""Writing the Parquet memtier produces: base files and Parquet log blocks alike.

Settings, each for a measured reason (bench/RESULTS.md):

* Arrow's schema is not stored: readers see plain Parquet types, as in files Hudi writes;
* statistics only on data columns: min/max of the unique meta strings cost a third of the
  write time, and no Hudi reader uses them;
* sequence numbers and record keys are unique per row: plain-encoded, no dictionary
  attempt (delta encoding made files 26% smaller but writes 35% slower);
* the constant meta columns (commit time, partition path, file name) are dictionaries;
* snappy, like Hudi's own Spark writes of recent versions.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from memtier.hudi.avro import META_FIELDS

__all__ = ["write_parquet"]

_UNIQUE_PER_ROW = ("_hoodie_commit_seqno", "_hoodie_record_key")


def write_parquet(table: pa.Table, sink: Any) -> None:
    """Write ``table`` (meta columns first, when present) to ``sink`` as one Parquet file."""
    names = table.column_names
    pq.write_table(
        table,
        sink,
        compression="snappy",
        store_schema=False,
        use_dictionary=[n for n in names if n not in _UNIQUE_PER_ROW],
        write_statistics=[n for n in names if n not in META_FIELDS],
        write_page_index=True,  # page statistics: engines (Trino) skip pages, not only row groups
    )
