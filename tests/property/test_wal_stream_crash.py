"""Crash recovery of WAL streams is exact, per block: kill a real writer process appending
each write to many blocks at once, or tear or damage the shared stream, and every block
recovers exactly its acknowledged frames (and nothing never written), on its own.

The writer is this module run as a child process: each thread is a producer writing
``batch_for(producer, seq)`` to each of its ``blocks`` blocks at once (queued as one append
as a table server does for the file groups of one write: on even ``seq`` one frame per
block, on odd ones one rows record of the batch and per block a selection of it:
:func:`selection_for`), then reports the acknowledgement; at ``seal_at`` its
blocks count as flushed (as a table server's are once in the Hudi table), segments holding
only flushed blocks are deleted (with no retention), and it goes on with new blocks.
Segments roll every few writes. The parent SIGKILLs it at a random moment, then recovers
as a table server does, from the segments left: every unflushed block exactly, every
flushed one never with a frame that was not written.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memtier.config import SyncPolicy, WalConfig
from memtier.errors import CorruptFileError
from memtier.io import FileIO, open_fileio
from memtier.wal import (
    GroupCommitter,
    StreamFrame,
    WalStream,
    recover_blocks,
)
from memtier.wal.format import (
    RECORD_HEADER_SIZE,
    RecordKind,
    Selection,
    frame_payload,
    header_length,
)
from memtier.wal.storage import list_logs
from tests.support.wal import SCHEMA, Run, batch_for, crash_child, header, producer_id


def stream_dir(root: str) -> str:
    return f"{root}/streams"


#: Segments the child's stream rolls past: a few writes each.
SEGMENT_BYTES = 16 << 10


def selection_for(rows: int, block: int) -> Selection:
    """The rows of a shared write's batch of ``rows`` rows that block ``block`` takes,
    never none: a run for an even block, row 0 and every third row for an odd one."""
    if block % 2 == 0:
        start = block // 2 % rows
        return Selection(rows - start, start)
    return Selection.of(np.array([0, *(i for i in range(1, rows) if (i + block) % 3 == 0)], np.int32))


def written(batch: pa.RecordBatch, block: int, shared: bool) -> pa.RecordBatch:
    """The rows of ``batch`` block ``block``'s frame holds: all of them, or its selection
    when the write was shared."""
    return selection_for(batch.num_rows, block).rows_of(batch) if shared else batch


# -- the child: a writer process ----------------------------------------------------------


def child(root: str, threads: int, blocks: int, policy: str, seals: dict[int, int]) -> None:
    """Append until killed; report ``ack <producer> <seq>`` and ``sealed <producer>``."""
    fileio = open_fileio(root)
    committer = GroupCommitter(WalConfig(sync_policy=SyncPolicy(policy)))
    stream = WalStream(fileio, stream_dir(root), table="t", owner="w", committer=committer,
                       segment_bytes=SEGMENT_BYTES)
    flushed: set[bytes] = set()  # file ids of the blocks counted as flushed
    out = sys.stdout.fileno()
    os.write(out, b"ready\n")

    def run(t: int) -> None:
        block_id = 1
        headers = {j: header(f"fg{t}-{j}", block_id) for j in range(blocks)}
        s = 0
        while True:
            if seals.get(t) == s:  # told first: from here on its old blocks' frames may go
                os.write(out, f"sealed {t}\n".encode())
                flushed.update(h.file_id for h in headers.values())
                stream.delete_flushed(lambda h: h.file_id in flushed, retention_s=0, now=time.time())
                block_id += 1
                headers = {j: header(f"fg{t}-{j}", block_id) for j in range(blocks)}
            batch = batch_for(t, s)
            payload = frame_payload(SCHEMA, batch)
            ids = {"txn_id": s // 4, "producer_id": producer_id(t), "producer_seq": s}
            if s % 2:  # shared: the batch once, a selection of it per block
                selections = [selection_for(batch.num_rows, j) for j in range(blocks)]
                frames = [StreamFrame(headers[j], sel, sel.count) for j, sel in enumerate(selections)]
                stream.queue(frames, **ids, rows=payload).pending.wait()
            else:
                frames = [StreamFrame(headers[j], payload, batch.num_rows) for j in range(blocks)]
                stream.queue(frames, **ids).pending.wait()
            os.write(out, f"ack {t} {s}\n".encode())  # one small write: atomic on a pipe
            s += 1

    workers = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(threads)]
    for w in workers:
        w.start()
    time.sleep(3600)  # wait to be killed


# -- the parent ---------------------------------------------------------------------------


def run_child(root: str, case: dict[str, Any]) -> Run:
    args = [root, str(case["threads"]), str(case["blocks"]), case["policy"], json.dumps(case["seals"])]
    return crash_child("tests.property.test_wal_stream_crash", args, kill_after=case["kill_after"],
                       delay_s=case["delay_s"])


def recover_all(fileio: FileIO, root: str) -> dict[tuple[str, int], list[int]]:
    """As a table server recovers: every block's frames from the segments left, checked
    against what was written; each block's sequence numbers, by (file group, block id)."""
    found: dict[tuple[str, int], list[int]] = {}
    for block in recover_blocks(fileio, stream_dir(root), lambda h: True):
        p, j = (int(n) for n in block.header.file_group[2:].split("-"))
        for frame in block.frames:
            assert int.from_bytes(frame.producer_id, "big") == p
            assert frame.txn_id == frame.producer_seq // 4
            shared = frame.producer_seq % 2 == 1
            assert frame.batch.equals(written(batch_for(p, frame.producer_seq), j, shared))
        found[(block.header.file_group, block.header.block_id)] = [f.producer_seq for f in block.frames]
    return found


def check_recovery(root: str, run: Run, case: dict[str, Any]) -> None:
    found = recover_all(open_fileio(root), root)
    for t in range(case["threads"]):
        last_ack = run.acked.get(t, -1)
        sealed_at = case["seals"][t] if t in run.sealed else None
        for j in range(case["blocks"]):
            if sealed_at is not None:  # block 1 is flushed: its segments may be gone
                old = found.get((f"fg{t}-{j}", 1), [])
                assert old == sorted(set(old)) and set(old) <= set(range(sealed_at)), old[:20]
            first = sealed_at or 0
            seqs = found.get((f"fg{t}-{j}", 2 if sealed_at is not None else 1), [])
            assert seqs == list(range(first, first + len(seqs))), f"producer {t} block {j}: {seqs[:20]}"
            assert last_ack + 1 <= first + len(seqs) <= last_ack + 2, (t, j, last_ack, len(seqs))


crash_cases = st.fixed_dictionaries(
    {
        "threads": st.integers(1, 4),
        "blocks": st.integers(2, 6),
        "policy": st.sampled_from([SyncPolicy.EVERY_APPEND.value, SyncPolicy.GROUP_WINDOW.value]),
        "kill_after": st.integers(0, 80),
        "delay_s": st.floats(0, 0.003),
        "seals": st.dictionaries(st.integers(0, 3), st.integers(1, 30), max_size=4),
    }
)


def run_case(root: str, case: dict[str, Any]) -> None:
    check_recovery(root, run_child(root, case), case)


def test_sigkill_during_writes_to_many_blocks_quick() -> None:
    with tempfile.TemporaryDirectory() as root:
        for i, case in enumerate([
            {"threads": 1, "blocks": 4, "policy": "every-append", "kill_after": 30,
             "delay_s": 0.001, "seals": {0: 12}},
            {"threads": 3, "blocks": 4, "policy": "every-append", "kill_after": 60,
             "delay_s": 0.0005, "seals": {0: 5, 2: 20}},
        ]):
            run_case(os.path.join(root, str(i)), case)


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crash_cases)
def test_sigkill_during_writes_to_many_blocks(case: dict[str, Any]) -> None:
    root = tempfile.mkdtemp()
    try:
        run_case(root, case)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- torn and damaged streams ------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    offset: int
    header_end: int
    end: int
    kind: RecordKind
    blocks: tuple[int, ...]  # the block it declares or is a frame of; a rows record: its selections'
    write: int  # the write it was appended (and synced) by


#: The records that are a block's frame.
FRAMES = (RecordKind.FRAME, RecordKind.SELECTION)


def write_stream(root: str, appends: list[list[int]]) -> tuple[str, list[Record]]:
    """One segment holding, for each write of ``appends`` (the blocks it writes to), a
    frame of each of its blocks: a frame record for one block, a rows record and a
    selection of it per block for several; each write synced before the next. Its path
    and every record, where the format lays them out."""
    fileio = open_fileio(root)
    headers = {b: header(f"fg{b}") for blocks in appends for b in blocks}
    with GroupCommitter() as committer:
        stream = WalStream(fileio, stream_dir(root), table="t", owner="w", committer=committer)
        for w, blocks in enumerate(appends):
            batch = batch_for(0, w)
            ids = {"txn_id": 0, "producer_id": producer_id(0), "producer_seq": w}
            if len(blocks) == 1:
                stream.append(headers[blocks[0]], frame_payload(SCHEMA, batch), batch.num_rows, **ids)
            else:
                selections = {b: selection_for(batch.num_rows, b) for b in blocks}
                frames = [StreamFrame(headers[b], sel, sel.count) for b, sel in selections.items()]
                stream.queue(frames, **ids, rows=frame_payload(SCHEMA, batch)).pending.wait()
        stream.close()
    [info] = list_logs(fileio, stream_dir(root))
    data = fileio.read_bytes(info.path)
    records: list[Record] = []
    pos, declared = header_length(data, info.path), set()
    for w, blocks in enumerate(appends):
        layout = [(RecordKind.ROWS, tuple(blocks))] if len(blocks) > 1 else []
        for b in blocks:
            if b not in declared:
                declared.add(b)
                layout.append((RecordKind.BLOCK, (b,)))
            layout.append((RecordKind.FRAME if len(blocks) == 1 else RecordKind.SELECTION, (b,)))
        for kind, of in layout:
            assert data[pos : pos + 4] == b"MTWR" and data[pos + 8] == kind, (pos, kind)
            end = pos + RECORD_HEADER_SIZE + int.from_bytes(data[pos + 12 : pos + 16], "little")
            records.append(Record(pos, pos + RECORD_HEADER_SIZE, end, kind, of, w))
            pos = end
    assert pos == len(data)
    return info.path, records


def expected(records: list[Record], before: int) -> dict[int, list[int]]:
    """The frames (their writes) per block of the records that end by ``before``."""
    kept: dict[int, list[int]] = {}
    for r in records:
        if r.kind in FRAMES and r.end <= before:
            kept.setdefault(r.blocks[0], []).append(r.write)
    return kept


def recovered(
    fileio: FileIO, root: str, appends: list[list[int]], skip: frozenset[int] = frozenset()
) -> dict[int, list[int]]:
    """The frames (their writes) per block recovered, but of the blocks in ``skip``; each
    frame holds exactly the rows written to its block."""
    blocks = recover_blocks(fileio, stream_dir(root), lambda h: int(h.file_group[2:]) not in skip)
    found: dict[int, list[int]] = {}
    for block in blocks:
        b = int(block.header.file_group[2:])
        for f in block.frames:
            assert f.batch.equals(written(batch_for(0, f.producer_seq), b, len(appends[f.producer_seq]) > 1))
        found[b] = [f.producer_seq for f in block.frames]
    return {b: writes for b, writes in found.items() if writes}


def check_damage(root: str, appends: list[list[int]], picks: list[tuple[int, int]]) -> None:
    """Cut the stream at, flip a bit of, or damage beyond repair, chosen bytes of chosen
    records: every block keeps exactly its frames that are intact and were acknowledged,
    on its own."""
    fileio = open_fileio(root)
    path, records = write_stream(root, appends)
    data = fileio.read_bytes(path)
    last_write = len(appends) - 1
    everything = expected(records, len(data))

    def fails(failed: dict[int, str]) -> None:
        """Exactly the blocks of ``failed`` fail, each for its reason; the others keep
        every frame."""
        assert recovered(fileio, root, appends, frozenset(failed)) == {
            b: writes for b, writes in everything.items() if b not in failed
        }
        for b, reason in failed.items():
            with pytest.raises(CorruptFileError, match=reason):
                recovered(fileio, root, appends, frozenset(failed) - {b})

    for index, where in picks:
        r = records[index % len(records)]
        at = r.offset + where % (r.end - r.offset)
        fileio.write_atomic(path, data[:at])  # torn at ``at``
        assert recovered(fileio, root, appends) == expected(records, at)
        fileio.write_atomic(path, data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1:])
        if at < r.header_end or r.kind is RecordKind.BLOCK:  # one flipped bit: repaired
            assert recovered(fileio, root, appends) == everything
        elif r.write == last_write:  # damage in the last write looks torn: never acked
            assert recovered(fileio, root, appends) == expected(records, r.offset)
        elif r.kind is RecordKind.ROWS:  # the blocks taking rows of it fail
            fails(dict.fromkeys(r.blocks, "rows payload checksum mismatch"))
        else:  # a frame's payload: only its block fails
            fails({r.blocks[0]: "payload checksum mismatch"})
        # a record header damaged beyond repair (two bytes of it)
        one, two = r.offset + 8 + where % 24, r.offset + 32 + where % 32
        fileio.write_atomic(path, data[:one] + bytes([data[one] ^ 0xFF]) + data[one + 1:two]
                            + bytes([data[two] ^ 0xFF]) + data[two + 1:])
        if r.write == last_write:
            assert recovered(fileio, root, appends) == expected(records, r.offset)
        elif r.kind is RecordKind.BLOCK:  # a lost declaration: its block's frames cannot be named
            with pytest.raises(CorruptFileError, match="declaration was lost"):
                recovered(fileio, root, appends)
        else:  # the blocks declared before it may have lost a frame, those selecting rows of
            # a lost rows record did; the others are exact
            failed = {d.blocks[0]: "lost before" for d in records
                      if d.kind is RecordKind.BLOCK and d.offset < r.offset}
            if r.kind is RecordKind.ROWS:
                failed = dict.fromkeys(r.blocks, "a selection of a rows record lost") | failed
            fails(failed)
        fileio.write_atomic(path, data)


damage_cases = (
    st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=4, unique=True), min_size=1, max_size=12),
    st.lists(st.tuples(st.integers(0, 100), st.integers(0, 10_000)), min_size=1, max_size=12),
)


@settings(max_examples=20, deadline=None)
@given(*damage_cases)
@example([[0, 1], [0]], [(2, 0)])  # block 1 declared after a lost selection of a run
def test_torn_and_damaged_streams_recover_exactly_per_block(
    appends: list[list[int]], picks: list[tuple[int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as root:
        check_damage(root, appends, picks)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(*damage_cases)
def test_torn_and_damaged_streams_recover_exactly_per_block_many(
    appends: list[list[int]], picks: list[tuple[int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as root:
        check_damage(root, appends, picks)


if __name__ == "__main__":
    child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4],
          {int(k): v for k, v in json.loads(sys.argv[5]).items()})
