"""A full WAL disk costs the writes made while it is full, not an outage: every write
acknowledged before stays readable, writes fail with a clear error while there is no room,
and resume by themselves as soon as room returns (the failed segment is cut back to its
last sync and the stream goes on in a new one), with nothing unacknowledged recovered later.
A disk the WAL fills by itself still takes the fence that moves a dead server's buckets
(the reserve the table servers leave free), so the survivor recovers and flushes them and
the disk empties. On a real file system: a small tmpfs mounted for the test (needs root)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from memtier.config import WalConfig
from memtier.errors import WalWriteFailedError
from memtier.wal.stream import stream_directory
from tests.support.acked import SCHEMA, Acked, batch
from tests.support.clock import ManualClock
from tests.support.hudirs import hudi_rs_read
from tests.support.inprocess import InProcessCluster

SIZE = 6 << 20
RESERVED = 256 << 10  # wal.reserved-bytes here (the default, 64 MiB, is more than SIZE)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of SIZE bytes, mounted for the test and unmounted after it."""
    mount = tmp_path / "wal-disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system for the WAL needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "append-only"])
def test_writes_resume_by_themselves_once_the_full_wal_disk_has_room_again(
    tmp_path: Path, small_disk: Path, keyed: bool
) -> None:
    filler = small_disk / "filler"  # what an operator deletes to make room
    filler.write_bytes(b"\0" * (SIZE - (1 << 20)))
    cluster = InProcessCluster(str(tmp_path / "root"), wal=str(small_disk / "wal"),
                               wal_config=WalConfig(reserved_bytes=RESERVED))
    try:
        cluster.add_server("ts-0")
        cluster.master.create_table("t", SCHEMA, "id" if keyed else None, ordering_field="ts", buckets=2)
        client = cluster.client()
        model = Acked(keyed)
        refused = 0
        for ts in range(1, 400):
            data = batch(list(range(ts * 1000, ts * 1000 + 1000)), ts)
            try:
                client.write("t", data)
            except WalWriteFailedError as e:
                assert "No space left" in str(e) or "ENOSPC" in str(e) or "space" in str(e), e
                refused += 1
                if refused == 3:  # the disk stays full: every write is refused, clearly
                    break
                continue
            model.acknowledged(data)
        assert refused == 3, "the WAL disk never filled up"
        model.check(client.read("t"), "memtier with the WAL disk full")
        server, producer, retried = cluster.servers["ts-0"], b"p" * 16, batch(list(range(900_000, 901_000)), 500)
        with pytest.raises(WalWriteFailedError):
            server.write("t", retried, producer_id=producer, producer_seq=1)
        filler.unlink()  # room again
        ack = server.write("t", retried, producer_id=producer, producer_seq=1)  # the same write again
        assert (ack.rows, ack.duplicate_rows) == (1000, 0), "a refused write is not held: its retry applies"
        model.acknowledged(retried)
        for ts in range(1000, 1010):
            data = batch(list(range(ts * 1000, ts * 1000 + 100)), ts)
            client.write("t", data)  # at once: no restart, no operator step
            model.acknowledged(data)
        model.check(client.read("t"), "memtier once room returned")
        cluster.restart_server("ts-0")  # recovery reads nothing the full disk refused
        client = cluster.client()
        model.check(client.read("t"), "memtier after the table server restarted")
        client.flush("t")
        model.check(hudi_rs_read(cluster.master.describe_table("t")["path"]), "hudi-rs")
        assert list(Path(stream_directory(cluster.wal_root, "t")).iterdir())
    finally:
        cluster.close()


@pytest.mark.parametrize("reserved", [RESERVED, 0], ids=["reserve", "no-reserve"])
def test_a_wal_that_fills_its_disk_still_lets_a_dead_servers_buckets_move_and_the_disk_empty(
    tmp_path: Path, small_disk: Path, reserved: int
) -> None:
    """The WAL fills the disk by itself (nothing flushes); its server is taken for dead:
    the master fences its WAL streams in the room the reserve kept, the survivor recovers
    its buckets, flushes them, deletes their segments, and writes resume. With no reserve
    the fence finds the disk full and the buckets stay with the dead server (shown here so
    that the test above cannot pass without the reserve)."""
    eager = WalConfig(reserved_bytes=reserved, retention=timedelta(0), retention_bytes=0,
                      segment_bytes=1 << 20, segment_age=timedelta(milliseconds=1))
    cluster = InProcessCluster(str(tmp_path / "root"), wal=str(small_disk / "wal"), wal_config=eager,
                               clock=ManualClock())
    try:
        cluster.add_server("ts-0")  # every bucket, as it is alone when the table is made
        cluster.master.create_table("t", SCHEMA, "id", ordering_field="ts", buckets=4)
        cluster.add_server("ts-1")
        client, model = cluster.client(), Acked(True)
        for ts in range(1, 1000):
            data = batch(list(range(ts * 500, ts * 500 + 500)), ts)
            try:
                client.write("t", data)
            except WalWriteFailedError as e:
                assert "space" in str(e), e
                break
            model.acknowledged(data)
        else:
            pytest.fail("the WAL never filled the disk")
        if not reserved:
            with pytest.raises(OSError, match="cannot fence life"):
                cluster.take_for_dead("ts-0")
            return
        cluster.take_for_dead("ts-0")
        survivor = cluster.servers["ts-1"]
        survivor.flush("t", seal=True)
        assert survivor.delete_expired_wals() > 0, "the dead server's flushed segments stay"
        client = cluster.client()
        for ts in range(2000, 2010):  # room again: no restart, no operator step
            data = batch(list(range(ts * 100, ts * 100 + 100)), ts)
            client.write("t", data)
            model.acknowledged(data)
        model.check(client.read("t"), "memtier once the survivor flushed the dead server's buckets")
        client.flush("t")
        model.check(hudi_rs_read(cluster.master.describe_table("t")["path"]), "hudi-rs")
    finally:
        cluster.close()
