"""Random upsert/delete histories of tables keyed on a string and on two columns, written
through table servers (flushes), then compacted and clustered: every base file is in
record-key order (the key columns in their own types, the first deciding), a read of a few
keys (memtier.hudi.keyread: row groups pruned by the key columns' statistics, rows found
by binary search) equals the whole slices read and filtered, a one-key read opens only row
groups whose leading key column can hold the key (one a file for a string key), and
hudi-rs reads the table as memtier does. Row groups of a few rows put keys on every
boundary."""

from __future__ import annotations

import shutil
import tempfile
from unittest.mock import patch

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memtier.client import Client
from memtier.compaction.worker import ServiceWorker
from memtier.hudi.basefile import key_order
from memtier.hudi.cache import SliceCache
from memtier.hudi.fsview import FileSystemView
from memtier.hudi.reader import read_table
from memtier.hudi.tablemeta import TableMeta
from memtier.io import open_fileio
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.inprocess import InProcessCluster

KEYS = 30
#: name -> (schema, record key, a row's key columns from a number)
KINDS = {
    "string": (
        pa.schema([("k", pa.string()), ("o", pa.int64()), ("part", pa.string()), ("v", pa.string())]),
        ["k"],
        lambda n: {"k": f"key{n}"},  # "key10" < "key2": string order, not numeric
    ),
    "composite": (
        pa.schema([("t", pa.string()), ("k", pa.int32()), ("o", pa.int64()), ("part", pa.string()),
                   ("v", pa.string())]),
        ["t", "k"],
        lambda n: {"t": "abc"[n % 3], "k": n // 3 - 4},  # runs of equal "t", negative ids too
    ),
}

NUMBER = st.integers(min_value=0, max_value=KEYS - 1)
OP = st.one_of(
    st.lists(st.tuples(NUMBER, st.integers(min_value=-1, max_value=4)), min_size=1, max_size=12).map(
        lambda r: ("upsert", r)),
    st.lists(NUMBER, min_size=1, max_size=6).map(lambda k: ("delete", k)),
    st.just(("flush", None)),
)


def key_of(kind: str, n: int) -> dict:
    return KINDS[kind][2](n) | {"part": f"p{n % 2}"}


def apply(client: Client, kind: str, number: int, op: tuple) -> None:
    schema = KINDS[kind][0]
    what, payload = op
    if what == "upsert":
        batch = [key_of(kind, n) | {"o": o, "v": f"c{number}-r{i}"} for i, (n, o) in enumerate(payload)]
        client.write("t", pa.Table.from_pylist(batch, schema=schema))
    elif what == "delete":
        keys = [key_of(kind, n) for n in sorted(set(payload))]
        client.delete("t", pa.Table.from_pylist(keys, schema=pa.schema(
            [schema.field(c) for c in keys[0]])))
    else:
        client.flush("t")


def check_base_files(meta: TableMeta, key_columns: list[str]) -> list[str]:
    """Every latest base file is in record-key order; their paths."""
    view = FileSystemView.build(meta.io, meta.base_path, meta.timeline())
    paths = [p for s in view.latest_slices() if (p := s.base_file_path(meta.base_path)) is not None]
    for path in paths:
        keys = pq.read_table(path, columns=key_columns)
        assert key_order(keys) is None, (path, keys.to_pylist())
    return paths


def check_key_reads(meta: TableMeta, kind: str, cache: SliceCache, probes: list[int]) -> None:
    key_columns = KINDS[kind][1]
    for n in probes:
        key = key_of(kind, n)
        filters = [(c, "=", key[c]) for c in key_columns]  # the key alone: every partition asked
        found = rows(read_table(meta, filters=filters, cache=cache))
        assert found == rows(read_table(meta, filters=filters)), filters
        fresh = SliceCache()
        read_table(meta, filters=filters, cache=fresh)
        opened = [(k[1], k[2]) for k in fresh._entries if k[0] == "keys"]
        leading = key_columns[0]
        for path, group in opened:  # pruned by the leading key column's statistics
            footer = pq.ParquetFile(path).metadata
            stats = footer.row_group(group).column(footer.schema.names.index(leading)).statistics
            assert stats.min <= key[leading] <= stats.max, (path, group, key)
        if len(key_columns) == 1:
            per_file = [p for p, _ in opened]
            assert len(per_file) == len(set(per_file)), opened  # one row group a file
    many = [key_of(kind, n) for n in probes]
    filters = [(c, "in", sorted({k[c] for k in many})) for c in key_columns]
    assert rows(read_table(meta, filters=filters, cache=cache)) == rows(read_table(meta, filters=filters))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(KINDS)), ops=st.lists(OP, min_size=1, max_size=8),
       group_rows=st.integers(min_value=1, max_value=4),
       probes=st.lists(st.integers(min_value=-1, max_value=KEYS), min_size=1, max_size=8, unique=True))
def test_base_files_in_key_order_and_key_reads_pruned_and_exact(kind, ops, group_rows, probes) -> None:
    root = tempfile.mkdtemp(prefix="memtier-keyorder-")
    cluster = InProcessCluster(root)
    schema, key_columns, _ = KINDS[kind]
    try:
        with patch("memtier.hudi.parquetfile.ROW_GROUP_ROWS", group_rows):
            cluster.add_server("ts-0")
            client = cluster.client()
            client.create_table("t", schema, record_key=key_columns, ordering_field="o",
                                partition_fields="part", buckets=2)
            for number, op in enumerate(ops, start=1):
                apply(client, kind, number, op)
            client.flush("t")
            path = client.describe("t")["path"]
            meta = TableMeta.load(open_fileio(path), path)
            cache = SliceCache()  # one reader across the table's life: cached parts reused
            latest = rows(client.read("t"))
            for service in (None, "compaction", "clustering"):
                if service is not None and cluster.master.schedule_service("t", service) is not None:
                    done = ServiceWorker("svc", cluster.master).run_once()
                    assert done is not None and done["state"] == "completed", done
                check_base_files(meta, key_columns)
                check_key_reads(meta, kind, cache, probes)
                assert rows(client.read("t")) == latest
                assert rows(hudi_rs_read(meta.base_path), schema.names) == latest
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)
