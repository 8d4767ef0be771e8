"""Reading WALs for the read path: zero-copy on local disk, live blocks, bad input."""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from memtier.errors import (
    NotAWalFileError,
    NotFoundError,
    SchemaMismatchError,
    UnknownFormatVersionError,
)
from memtier.io import FileIO, open_fileio
from memtier.wal import GroupCommitter, WalWriter, read_header, read_seal, read_wal
from tests.support.wal import SCHEMA, batch_for, header, producer_id, wal_path, write_wal


def test_local_reads_are_zero_copy(tmp_path: Path) -> None:
    """Batches point into the memory-mapped file: a column's address sits at the same
    offset within its page as its bytes within the file, and Arrow allocated nothing."""
    fileio = open_fileio(str(tmp_path))
    path = wal_path(fileio, str(tmp_path))
    schema = pa.schema([("k", pa.int64())])
    columns = [np.arange(i * 100_000, (i + 1) * 100_000) for i in range(3)]
    with GroupCommitter() as committer:
        writer = WalWriter.create(fileio, path, header(schema=schema), committer)
        for i, column in enumerate(columns):
            writer.append(
                pa.record_batch({"k": column}, schema=schema),
                txn_id=1,
                producer_id=producer_id(1),
                producer_seq=i,
            )
        writer.close()
    file_bytes = fileio.read_bytes(path)
    before = pa.total_allocated_bytes()
    contents = read_wal(fileio, path)
    assert pa.total_allocated_bytes() == before
    for frame, column in zip(contents.frames, columns, strict=True):
        values = frame.batch.column(0).buffers()[1]
        in_file = file_bytes.index(column[:8].tobytes(), frame.offset)
        assert frame.offset < in_file < frame.offset + frame.length
        assert values.address % 4096 == in_file % 4096
        assert np.array_equal(frame.batch.column(0).to_numpy(), column)


def test_read_header_and_seal(fileio: FileIO, any_root: str) -> None:
    path = wal_path(fileio, any_root)
    h = header()
    write_wal(fileio, path, [(1, 0)], wal_header=h)
    assert read_header(fileio, path) == h
    assert read_seal(fileio, path, h) is None
    sealed = wal_path(fileio, any_root, block_id=2)
    write_wal(fileio, sealed, [(1, 0), (1, 1)], seal=True, wal_header=header(block_id=2))
    seal = read_seal(fileio, sealed, read_header(fileio, sealed))
    assert seal is not None and seal.frame_count == 2


def test_read_a_live_block_up_to_its_durable_size(fileio: FileIO, any_root: str) -> None:
    """A reader racing a writer sees a prefix of the frames, never an error; with the
    writer's durable size it sees exactly the acknowledged frames."""
    path = wal_path(fileio, any_root)
    with GroupCommitter() as committer:
        writer = WalWriter.create(fileio, path, header(), committer)
        stop = threading.Event()
        seen: list[int] = []

        def read_along() -> None:
            while not stop.is_set():
                frames = read_wal(fileio, path).frames
                assert [f.producer_seq for f in frames] == list(range(len(frames)))
                seen.append(len(frames))

        reader = threading.Thread(target=read_along)
        reader.start()
        for s in range(200):
            writer.append(batch_for(1, s), txn_id=0, producer_id=producer_id(1), producer_seq=s)
            if s % 50 == 0:
                assert len(read_wal(fileio, path, end=writer.durable_size).frames) == s + 1
        stop.set()
        reader.join()
        writer.close()
    assert seen and seen == sorted(seen)


def test_expected_schema(fileio: FileIO, any_root: str) -> None:
    path = wal_path(fileio, any_root)
    write_wal(fileio, path, [(1, 0)])
    assert read_wal(fileio, path, schema=SCHEMA).header.schema == SCHEMA
    with pytest.raises(
        SchemaMismatchError,
        match=r"schema of WAL .*fg\.0000000000000001\.wal does not match the expected schema: "
        r"missing 'extra'",
    ):
        read_wal(fileio, path, schema=SCHEMA.append(pa.field("extra", pa.int8())))


def test_not_a_wal_and_unknown_version(fileio: FileIO, any_root: str) -> None:
    path = fileio.join(any_root, "data.parquet")
    fileio.write_atomic(path, b"PAR1" + bytes(64))
    with pytest.raises(
        NotAWalFileError, match=r"data\.parquet: corrupt at byte 0: not a memtier WAL file"
    ):
        read_wal(fileio, path)
    with pytest.raises(NotAWalFileError):
        read_header(fileio, path)
    wal = wal_path(fileio, any_root)
    write_wal(fileio, wal, [(1, 0)])
    data = bytearray(fileio.read_bytes(wal))
    struct.pack_into("<H", data, 8, 7)
    fileio.write_atomic(wal, bytes(data))
    with pytest.raises(UnknownFormatVersionError, match="WAL format version 7 is not supported"):
        read_wal(fileio, wal)
    with pytest.raises(NotFoundError):
        read_wal(fileio, fileio.join(any_root, "missing.0000000000000001.wal"))
