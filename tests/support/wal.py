"""Small builders for WAL tests: a schema, deterministic batches per (producer, seq), WALs,
and the harness of the crash tests (a writer process killed at a random moment)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from memtier.io import FileIO, FsspecFileIO, open_fileio
from memtier.wal import (
    FrameLocation,
    GroupCommitter,
    SegmentName,
    WalFileName,
    WalHeader,
    WalWriter,
    list_wals,
    read_stream,
    read_wal,
)
from memtier.wal.storage import list_logs

SCHEMA = pa.schema(
    [
        ("producer", pa.int64()),
        ("seq", pa.int64()),
        ("row", pa.int32()),
        ("payload", pa.string()),
    ]
)


class ObjectStoreOnMemory(FsspecFileIO):
    """``memory://`` behaving like an object store: no appends, so one object per commit."""

    supports_append = False


def producer_id(producer: int) -> bytes:
    """A client's 16-byte producer id."""
    return producer.to_bytes(16, "big")


def batch_for(producer: int, seq: int, rows: int | None = None) -> pa.RecordBatch:
    """The batch producer ``producer`` appends as its ``seq``-th write (same every time)."""
    rows = 1 + (producer * 7 + seq * 13) % 40 if rows is None else rows
    return pa.record_batch(
        {
            "producer": pa.array([producer] * rows, pa.int64()),
            "seq": pa.array([seq] * rows, pa.int64()),
            "row": pa.array(range(rows), pa.int32()),
            "payload": pa.array([f"p{producer}-s{seq}-r{r}" for r in range(rows)]),
        },
        schema=SCHEMA,
    )


def header(file_group: str = "fg", block_id: int = 1, schema: pa.Schema = SCHEMA) -> WalHeader:
    return WalHeader("table", "date=2024-01-01", file_group, block_id, schema, 1_700_000_000_000)


def wal_path(fileio: FileIO, root: str, file_group: str = "fg", block_id: int = 1) -> str:
    return fileio.join(root, WalFileName(file_group, block_id).name)


def write_wal(
    fileio: FileIO,
    path: str,
    appends: list[tuple[int, int]],
    *,
    seal: bool = False,
    wal_header: WalHeader | None = None,
) -> list[FrameLocation]:
    """A WAL holding ``batch_for(p, s)`` for each (p, s) in order, each acknowledged."""
    with GroupCommitter() as committer:
        writer = WalWriter.create(fileio, path, wal_header or header(), committer)
        locations = [
            writer.append(
                batch_for(p, s), txn_id=s // 4, producer_id=producer_id(p), producer_seq=s
            )
            for p, s in appends
        ]
        if seal:
            writer.seal()
        else:
            writer.close()
    return locations


def held_blocks(wal_root: str) -> dict[bytes, int]:
    """Rows per block (by its file id) that the WALs below ``wal_root`` hold: from its
    block file, or, while it has none, from the WAL streams (so a block file being
    written in the background changes nothing)."""
    io = open_fileio(wal_root)
    streamed: dict[bytes, int] = {}
    for info in list_logs(io, wal_root):
        if SegmentName.parse(info.name) is not None:
            for block in read_stream(io, info.path).blocks:
                rows = sum(f.batch.num_rows for f in block.frames)
                streamed[block.header.file_id] = streamed.get(block.header.file_id, 0) + rows
    files = {}
    for entry in list_wals(io, wal_root):
        contents = read_wal(io, entry.path)
        files[contents.header.file_id] = contents.row_count
    return {**streamed, **files}


REPO = Path(__file__).resolve().parents[2]
CHILD_DEADLINE_S = 60.0


@dataclass
class Run:
    """What a killed writer process reported before it died."""

    acked: dict[int, int] = field(default_factory=dict)  # producer -> last acked seq
    sealed: set[int] = field(default_factory=set)
    lines: int = 0


def crash_child(
    module: str, args: Sequence[str], *, kill_after: int, delay_s: float, producers: int | None = None
) -> Run:
    """Run ``python -m module *args`` (a writer printing ``ack <producer> <seq>`` and
    ``sealed <producer>`` lines) and SIGKILL it ``delay_s`` after its ``kill_after``-th
    ack (or once ``producers`` producers sealed): a random moment, aimed at no step."""
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    run = Run()
    enough = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            kind, *rest = line.decode().split()
            if kind == "ack":
                run.acked[int(rest[0])] = int(rest[1])
                run.lines += 1
            elif kind == "sealed":
                run.sealed.add(int(rest[0]))
            if run.lines >= kill_after or len(run.sealed) == producers:
                enough.set()

    reader = threading.Thread(target=read)
    reader.start()
    try:
        if not enough.wait(CHILD_DEADLINE_S):
            state = "hung" if proc.poll() is None else proc.stderr.read().decode()  # type: ignore[union-attr]
            raise AssertionError(f"the writer made no progress: {state}")
        time.sleep(delay_s)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        reader.join()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()  # type: ignore[union-attr]
    return run
