"""The interop suite with the table on s3:// (a real SeaweedFS server on loopback):
memtier writes and reads through pyarrow's S3 client, hudi-rs reads the same table
through its own object-store client, both equal to the model."""

from __future__ import annotations

import random
import uuid

import pytest

from memtier.hudi import HudiTable
from memtier.io import join, open_fileio
from tests.interop.test_hudi_rs_reads_ours import DATA_COLUMNS, SCHEMA, comparable, make_row, to_arrow
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.model import TableModel

pytestmark = pytest.mark.s3


@pytest.mark.parametrize("table_type", ["MERGE_ON_READ", "COPY_ON_WRITE"])
def test_table_on_s3_reads_the_same_in_memtier_and_hudi_rs(s3_server, table_type: str) -> None:
    path = s3_server.uri("tables", f"t-{uuid.uuid4().hex[:8]}")
    options = s3_server.storage_options
    table = HudiTable.create(
        path, SCHEMA, record_key=["id", "name"], ordering_field="version",
        partition_fields="region", buckets=2, table_type=table_type, storage_options=options,
    )
    model = TableModel(
        ("id", "name"), "version", ("region",), buckets=2, copy_on_write=table_type == "COPY_ON_WRITE"
    )
    rng = random.Random(11)
    instants = []
    batches = [
        ("upsert", [make_row(rng, k, 1) for k in range(60)]),
        ("upsert", [make_row(rng, k, 2) for k in range(0, 60, 3)] + [make_row(rng, k, 0) for k in range(1, 60, 7)]),
        ("delete", [make_row(rng, k, 0) for k in range(0, 60, 10)]),
    ]
    for commit, (kind, batch) in enumerate(batches, start=1):
        if kind == "delete":
            instants.append(table.write(to_arrow(batch), operation="delete"))
            model.delete(commit, batch)
        else:
            instants.append(table.write(to_arrow(batch)))
            model.upsert(commit, batch)
    expected = comparable(model.rows())
    reopened = HudiTable.open(path, storage_options=options)
    assert rows(reopened.read(), DATA_COLUMNS) == expected
    assert rows(hudi_rs_read(path, storage_options=options), DATA_COLUMNS) == expected
    first = rows(hudi_rs_read(path, as_of=instants[0], storage_options=options), DATA_COLUMNS)
    assert first == rows(reopened.read(as_of=instants[0]), DATA_COLUMNS)
    ro = rows(hudi_rs_read(path, "read_optimized", storage_options=options), DATA_COLUMNS)
    assert ro == rows(reopened.read(mode="read_optimized"), DATA_COLUMNS)


def test_a_write_that_fails_midway_publishes_nothing_on_s3(s3_server) -> None:
    root = s3_server.uri("pieces", uuid.uuid4().hex[:8])
    fileio = open_fileio(root, s3_server.storage_options)

    def failing():
        yield b"block 1"
        raise RuntimeError("encoding block 2 failed")

    with pytest.raises(RuntimeError, match="block 2"):
        fileio.create_exclusive(join(root, "f.log"), failing())
    assert not fileio.exists(join(root, "f.log"))
    fileio.create_exclusive(join(root, "g.log"), iter([b"ab", b"cd"]))
    assert fileio.read_bytes(join(root, "g.log")) == b"abcd"
    with pytest.raises(RuntimeError, match="parquet writer"):
        with fileio.open_output(join(root, "base.parquet")) as sink:
            sink.write(b"PAR1 partial")
            raise RuntimeError("parquet writer failed")
    assert fileio.list_files(root) == [fileio.info(join(root, "g.log"))]
