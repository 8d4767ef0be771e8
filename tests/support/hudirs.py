"""hudi-rs (the ``hudi`` package), the independent reader every interop test checks against."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

META_COLUMNS = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)


def hudi_rs_read(
    path: str,
    mode: str = "snapshot",
    *,
    as_of: str | None = None,
    start: str | None = None,
    end: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> pa.Table:
    """Read a table with hudi-rs, in the same modes memtier offers."""
    from hudi import HudiQueryType, HudiReadOptions, HudiTableBuilder

    builder = HudiTableBuilder.from_base_uri(path)
    for key, value in (storage_options or {}).items():
        builder = builder.with_storage_option(key, value)
    table = builder.build()
    options = HudiReadOptions()
    if mode == "read_optimized":
        options = options.with_hudi_option("hoodie.read.use.read_optimized.mode", "true")
    elif mode == "incremental":
        options = options.with_query_type(HudiQueryType.Incremental).with_start_timestamp(start)
        if end is not None:
            options = options.with_end_timestamp(end)
    elif mode != "snapshot":
        raise ValueError(mode)
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    batches = table.read(options)
    if batches:
        return pa.Table.from_batches(batches)  # hudi-rs may move partition columns last
    return table.get_schema_with_meta_fields().empty_table()


def rows(table: pa.Table, columns: Sequence[str] | None = None, key: Sequence[str] = ()) -> list[tuple]:
    """Rows as sorted tuples (data columns only unless ``columns`` names others)."""
    names = list(columns) if columns is not None else [
        c for c in table.column_names if c not in META_COLUMNS
    ]
    data = table.select(names).to_pylist()
    tuples = [tuple(r[n] for n in names) for r in data]
    return sorted(tuples, key=lambda t: tuple(repr(v) for v in t))
