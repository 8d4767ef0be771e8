"""Writing the Parquet memtier produces: base files and Parquet log blocks alike.

Settings, each for a measured reason (bench/RESULTS.md):

* Arrow's schema is not stored: readers see plain Parquet types, as in files Hudi writes;
* statistics only on data columns: min/max of the unique meta strings cost a third of the
  write time, and no Hudi reader uses them;
* sequence numbers and record keys are unique per row: plain-encoded, no dictionary
  attempt (delta encoding made files 26% smaller but writes 35% slower);
* the constant meta columns (commit time, partition path, file name) are dictionaries;
* snappy, like Hudi's own Spark writes of recent versions;
* row groups of :data:`ROW_GROUP_ROWS` rows: a read of a few keys decodes one row group
  (about 1 ms of CPU; a row group of 1M rows, pyarrow's default, took 60 ms), and base
  files are sorted by key, so the row groups' key statistics name the one that can hold
  a key. Writes cost ~10% more CPU and whole-file reads up to ~70% more than with 1M-row
  groups (8,192 rows halved a lookup's decode but doubled whole-file reads);
* dictionaries of at most :data:`DICTIONARY_BYTES` a column chunk: in row groups that
  small, a column of (nearly) unique strings would otherwise be dictionary-encoded in
  every one, making files 15% larger and writes twice as slow; past the limit a column
  chunk falls back to plain encoding, while columns of few values keep their dictionary.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from memtier.hudi.avro import META_FIELDS

__all__ = ["DICTIONARY_BYTES", "ROW_GROUP_ROWS", "write_parquet"]

ROW_GROUP_ROWS = 16_384
DICTIONARY_BYTES = 16 << 10

_UNIQUE_PER_ROW = ("_hoodie_commit_seqno", "_hoodie_record_key")


def write_parquet(table: pa.Table, sink: Any, metadata: Mapping[str, str] | None = None) -> None:
    """Write ``table`` (meta columns first, when present) to ``sink`` as one Parquet file,
    with ``metadata`` as key-value entries of its footer."""
    names = table.column_names
    with pq.ParquetWriter(
        sink,
        table.schema,
        compression="snappy",
        store_schema=False,
        use_dictionary=[n for n in names if n not in _UNIQUE_PER_ROW],
        dictionary_pagesize_limit=DICTIONARY_BYTES,
        write_statistics=[n for n in names if n not in META_FIELDS],
        write_page_index=True,  # page statistics: engines (Trino) skip pages, not only row groups
    ) as writer:
        writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        if metadata:
            writer.add_key_value_metadata(dict(metadata))
