"""Crash recovery is exact: kill a real writer process, or tear its last frame, and
recovery returns the acknowledged frames in order, and nothing that was never written.

The writer is this module run as a child process (``python -m tests.property.test_wal_crash
...``): its threads append deterministic batches (``batch_for(producer, seq)``) and report
each acknowledgement on stdout; the parent SIGKILLs it at a random moment. A process kill
keeps the page cache, so a frame written but not yet acknowledged may survive too: each
producer's frames must be exactly its sequence numbers 0..k-1, where k is one or two more
than its last acknowledged sequence number (its in-flight append, acknowledged or not).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memtier.config import SyncPolicy, WalConfig
from memtier.io import FileIO, open_fileio
from memtier.wal import GroupCommitter, WalWriter, recover
from tests.support.wal import Run, batch_for, crash_child, header, producer_id, wal_path, write_wal

# -- the child: a writer process ----------------------------------------------------------


def child(
    root: str, options: dict[str, str], threads: int, files: int, policy: str, seals: dict[int, int]
) -> None:
    """Append until killed; report ``ack <producer> <seq>`` and ``sealed <producer>``."""
    fileio = open_fileio(root, options or None)
    committer = GroupCommitter(WalConfig(sync_policy=SyncPolicy(policy)))
    writers = [
        WalWriter.create(fileio, wal_path(fileio, root, f"fg{i}"), header(f"fg{i}"), committer)
        for i in range(files)
    ]
    out = sys.stdout.fileno()
    os.write(out, b"ready\n")

    def run(t: int) -> None:
        writer, s = writers[t % files], 0
        while True:
            if seals.get(t) == s:
                writer.seal()
                os.write(out, f"sealed {t}\n".encode())
                return
            writer.append(
                batch_for(t, s), txn_id=s // 4, producer_id=producer_id(t), producer_seq=s
            )
            os.write(out, f"ack {t} {s}\n".encode())  # one small write: atomic on a pipe
            s += 1

    workers = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    time.sleep(3600)  # wait to be killed


# -- the parent ---------------------------------------------------------------------------


def check_recovery(fileio: FileIO, root: str, run: Run, threads: int, files: int) -> None:
    """Each producer's frames are exactly 0..k-1 with k one or two past its last ack."""
    for i in range(files):
        recovered = recover(fileio, wal_path(fileio, root, f"fg{i}"))
        contents = recovered.contents
        seqs: dict[int, list[int]] = {t: [] for t in range(threads) if t % files == i}
        for frame in contents.frames:
            p = int.from_bytes(frame.producer_id, "big")
            assert p in seqs, f"frame of unknown producer {p}"
            assert frame.txn_id == frame.producer_seq // 4
            assert frame.batch.equals(batch_for(p, frame.producer_seq)), (p, frame.producer_seq)
            seqs[p].append(frame.producer_seq)
        for p, found in seqs.items():
            last_ack = run.acked.get(p, -1)
            assert found == list(range(len(found))), f"producer {p}: {found[:20]}..."
            assert last_ack + 1 <= len(found) <= last_ack + 2, (p, last_ack, len(found))
            if found:
                assert recovered.producer_seqs[producer_id(p)] == len(found) - 1
        if any(p in run.sealed for p in seqs):
            assert contents.sealed
        if contents.sealed:
            assert contents.seal is not None and contents.seal.frame_count == len(contents.frames)
        else:  # the block can go on after recovery
            with GroupCommitter() as committer:
                writer = WalWriter.resume(fileio, contents, committer)
                p = next(iter(seqs))
                s = len(seqs[p])
                writer.append(
                    batch_for(p, s), txn_id=s // 4, producer_id=producer_id(p), producer_seq=s
                )
                writer.close()
            again = recover(fileio, wal_path(fileio, root, f"fg{i}")).contents
            assert len(again.frames) == len(contents.frames) + 1 and again.tail == 0


crash_cases = st.fixed_dictionaries(
    {
        "threads": st.integers(1, 6),
        "files": st.integers(1, 3),
        "policy": st.sampled_from([p.value for p in SyncPolicy]),
        "kill_after": st.integers(0, 120),
        "delay_s": st.floats(0, 0.003),
        "seal_at": st.lists(st.integers(1, 40), min_size=6, max_size=6),
        "seal_some": st.booleans(),
    }
)


def run_case(root: str, options: dict[str, str], case: dict[str, Any], settle_s: float = 0.0) -> None:
    threads = case["threads"]
    files = min(case["files"], threads)
    # A block is sealed by its only producer, so only with one thread per file.
    seals = (
        {t: case["seal_at"][t] for t in range(threads)}
        if case["seal_some"] and files == threads
        else {}
    )
    args = [root, json.dumps(options), str(threads), str(files), case["policy"], json.dumps(seals)]
    run = crash_child("tests.property.test_wal_crash", args, kill_after=case["kill_after"],
                      delay_s=case["delay_s"], producers=threads)
    time.sleep(settle_s)
    check_recovery(open_fileio(root, options or None), root, run, threads, files)


def test_sigkill_quick() -> None:
    """A few kills in the default run (the slow test below runs many)."""
    with tempfile.TemporaryDirectory() as root:
        for i, case in enumerate(
            [
                {
                    "threads": 1,
                    "files": 1,
                    "policy": "every-append",
                    "kill_after": 30,
                    "delay_s": 0.001,
                    "seal_at": [0] * 6,
                    "seal_some": False,
                },
                {
                    "threads": 6,
                    "files": 2,
                    "policy": "every-append",
                    "kill_after": 80,
                    "delay_s": 0.0005,
                    "seal_at": [0] * 6,
                    "seal_some": False,
                },
                {
                    "threads": 3,
                    "files": 3,
                    "policy": "group-window",
                    "kill_after": 40,
                    "delay_s": 0.002,
                    "seal_at": [5, 90, 90, 0, 0, 0],
                    "seal_some": True,
                },
            ]
        ):
            run_case(os.path.join(root, str(i)), {}, case)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crash_cases)
def test_sigkill_at_random_points(case: dict[str, Any]) -> None:
    root = tempfile.mkdtemp()
    try:
        run_case(root, {}, case)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.s3
def test_sigkill_on_s3(s3_server: Any) -> None:
    """On an object store an acknowledged frame is in a PUT object; kill and recover."""
    for i, policy in enumerate(["every-append", "group-window"]):
        root = s3_server.uri(f"crash-{time.time_ns()}-{i}")
        case = {
            "threads": 4,
            "files": 2,
            "policy": policy,
            "kill_after": 40,
            "delay_s": 0.002,
            "seal_at": [0] * 6,
            "seal_some": False,
        }
        # A PUT the killed writer had fully sent still lands after its death; recovery
        # waits that out, as a table server's takeover does (a heartbeat timeout is seconds).
        run_case(root, s3_server.storage_options, case, settle_s=1.0)


# -- torn and damaged last frames, at every byte --------------------------------------------


def check_torn_last_record(root: str, appends: list[tuple[int, int]], seal: bool) -> None:
    """Cut the WAL inside its last record, or flip any byte of it: recovery keeps exactly
    the records before it, durably."""
    fileio = open_fileio(root)
    original = wal_path(fileio, root, "orig")
    write_wal(fileio, original, appends, seal=seal)
    data = fileio.read_bytes(original)
    full = recover(fileio, original).contents
    last = full.frames[-1].offset + (full.frames[-1].length if seal else 0)
    kept = [s for _, s in appends][: len(appends) - (not seal)]
    path = wal_path(fileio, root, "copy")
    for at in range(last, len(data)):
        for damaged in (data[:at], data[:at] + bytes([data[at] ^ 0xA5]) + data[at + 1 :]):
            fileio.write_atomic(path, damaged)
            recovered = recover(fileio, path)
            assert [f.producer_seq for f in recovered.contents.frames] == kept
            assert recovered.contents.seal is None
            assert fileio.info(path).size == last == recovered.contents.size


appends_cases = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50)), min_size=1, max_size=8)


@settings(max_examples=5, deadline=None)
@given(appends_cases, st.booleans())
def test_every_torn_or_damaged_byte_of_the_last_record(
    appends: list[tuple[int, int]], seal: bool
) -> None:
    """On ``memory://`` (no fsync, fast); the slow test below does it on local disk."""
    root = f"memory://torn-{time.time_ns()}"
    try:
        check_torn_last_record(root, appends, seal)
    finally:
        open_fileio(root).delete_dir(root)


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(appends_cases, st.booleans())
def test_every_torn_or_damaged_byte_of_the_last_record_on_disk(
    appends: list[tuple[int, int]],
    seal: bool,
) -> None:
    with tempfile.TemporaryDirectory() as root:
        check_torn_last_record(root, appends, seal)


if __name__ == "__main__":
    child(
        sys.argv[1],
        json.loads(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
        sys.argv[5],
        {int(k): v for k, v in json.loads(sys.argv[6]).items()},
    )
