"""Avro codec benchmark: the Hudi log-block encoding against Parquet and fastavro.

    .venv/bin/python bench/avro_codec.py [--rows 1000000] [--repeat 5] [--fastavro-rows 50000]

The table is the benchmark table (int64 key, int64 epoch-microsecond ts, ~20-char string,
double, int32) plus the five Hudi meta columns as the writer builds them: commit time,
partition path and file name one value per block (dictionary arrays), sequence number and
record key per row. Measures in one run, best of ``--repeat``: pyarrow.parquet.write_table
of the same table (the baseline), fastavro's per-record schemaless_writer (on a
subsample, scaled; rows already converted to dicts, so generous to fastavro),
encode_records, a whole Avro data block, decode_records, reading the block back
(record framing walk + decode), record_keys and bucket_ids; plus the first call of
encode and decode in the process. Prints rows/s and ratios; writes
bench/results/avro_codec.json.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_table, report  # noqa: E402
from memtier.hudi.avro import (  # noqa: E402
    arrow_to_avro_schema,
    decode_records,
    encode_records,
    with_meta_fields,
)
from memtier.hudi.keys import bucket_ids, record_keys  # noqa: E402
from memtier.hudi.logformat import avro_data_block, iter_blocks, read_data_block  # noqa: E402

INSTANT = "20250101000000000"
FILE_ID = "00000003-9f2c-4a1e-b7d1-2e3f4a5b6c7d-0"
BUCKETS = 256


def constant(value: str, rows: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array([value]))


def log_records(rows: int) -> pa.Table:
    """The benchmark table with realistic timestamps and the five meta columns in front."""
    data = bench_table(rows)
    ts = 1_700_000_000_000_000 + np.random.default_rng(1).integers(0, 10**12, rows)
    data = data.set_column(1, "ts", pa.array(ts, pa.int64()))
    numbers = pa.array(np.arange(rows, dtype=np.int64)).cast(pa.string())
    meta = {
        "_hoodie_commit_time": constant(INSTANT, rows),
        "_hoodie_commit_seqno": pc.binary_join_element_wise(f"{INSTANT}_0_", numbers, ""),
        "_hoodie_record_key": record_keys(data, ["key"]),
        "_hoodie_partition_path": constant("region=eu-west-1", rows),
        "_hoodie_file_name": constant(FILE_ID, rows),
    }
    return pa.table({**meta, **{name: data.column(name) for name in data.column_names}})


def best(repeat: int, fn: Callable[[], Any]) -> float:
    """The fastest of ``repeat`` runs (seconds): the machine is shared and noisy."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def fastavro_seconds(records: pa.Table, schema: dict, sample: int, repeat: int) -> float:
    """fastavro encoding ``sample`` rows one by one, scaled to the whole table."""
    rows = records.slice(0, sample).to_pylist()
    parsed = fastavro.parse_schema(schema)

    def encode() -> None:
        out = io.BytesIO()
        for row in rows:
            fastavro.schemaless_writer(out, parsed, row)

    return best(repeat, encode) * records.num_rows / len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--fastavro-rows", type=int, default=50_000)
    args = parser.parse_args()
    rows, repeat = args.rows, args.repeat

    records = log_records(rows)
    data = records.drop_columns(records.column_names[:5])
    schema = with_meta_fields(arrow_to_avro_schema(data.schema, "bench"))

    first_encode, (encoded, offsets) = timed(lambda: encode_records(records, schema))
    first_decode, _ = timed(lambda: decode_records(encoded, offsets, schema))
    block = avro_data_block(records, schema, INSTANT)
    (parsed_block,) = iter_blocks(memoryview(block), "bench.log")
    assert read_data_block(parsed_block).equals(decode_records(encoded, offsets, schema))

    sample = min(rows, args.fastavro_rows)
    seconds = {
        "parquet write_table (baseline)": best(
            repeat, lambda: pq.write_table(records, pa.BufferOutputStream())
        ),
        "fastavro per record (scaled)": fastavro_seconds(records, schema, sample, repeat),
        "encode_records": best(repeat, lambda: encode_records(records, schema)),
        "avro_data_block": best(repeat, lambda: avro_data_block(records, schema, INSTANT)),
        "decode_records": best(repeat, lambda: decode_records(encoded, offsets, schema)),
        "read_data_block": best(repeat, lambda: read_data_block(parsed_block)),
        "record_keys (int64)": best(repeat, lambda: record_keys(data, ["key"])),
        "bucket_ids (int64)": best(repeat, lambda: bucket_ids(data, ["key"], BUCKETS)),
        "bucket_ids (string keys)": best(
            repeat, lambda: bucket_ids(records, ["_hoodie_commit_seqno"], BUCKETS)
        ),
    }
    parquet = seconds["parquet write_table (baseline)"]
    fastavro_time = seconds["fastavro per record (scaled)"]
    seconds["encode_records, first call"] = first_encode
    seconds["decode_records, first call"] = first_decode
    table = [
        [name, round(s, 4), round(rows / s), round(parquet / s, 2), round(fastavro_time / s, 1)]
        for name, s in seconds.items()
    ]
    report(
        "avro_codec",
        ["operation", "seconds", "rows/s", "x parquet", "x fastavro"],
        table,
        {
            "table_rows": rows,
            "repeat": repeat,
            "avro_bytes_per_row": round(len(encoded) / rows, 1),
            "block_bytes": len(block),
            "targets": {"encode_records rows/s": 3_000_000, "decode_records rows/s": 3_000_000,
                        "avro_data_block x parquet": 0.3},
        },
    )


if __name__ == "__main__":
    main()
