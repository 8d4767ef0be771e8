"""The small orders table the engine interop tests read: four rows in two partitions, then
an update of one (into a log file) and a row of a new partition."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from memtier.hudi import HudiTable

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("amount", pa.float64())])
COLUMNS = SCHEMA.names


def write_orders(path: str, storage_options: Mapping[str, str] | None = None) -> HudiTable:
    """The orders table at ``path``, its two commits written."""
    table = HudiTable.create(path, SCHEMA, record_key="id", ordering_field="ts", partition_fields="city",
                             buckets=2, storage_options=storage_options)
    table.write(pa.table({"id": [1, 2, 3, 4], "ts": [1, 1, 1, 1], "city": ["oslo", "rome", "oslo", "rome"],
                          "amount": [10.0, 20.0, 30.0, 40.0]}, schema=SCHEMA))
    table.write(pa.table({"id": [1, 5], "ts": [2, 1], "city": ["oslo", "lima"], "amount": [11.0, 50.0]},
                         schema=SCHEMA))  # id 1 into a log file; city=lima a new partition
    return table
