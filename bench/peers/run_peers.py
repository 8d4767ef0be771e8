"""What a user would pick instead of memtier: deltalake appends and pypaimon commits.

Runs inside the peer venv (pypaimon pins pyarrow<20), made by ``bench/peers/setup.sh``:

    bench/.venv-peers/bin/python bench/peers/run_peers.py --dir DIR [--rows-per-batch 10000]
        [--batches 100] [--visible-batches 20] [--pk-python-batches 30] [--systems a,b]

Every system gets a new table under DIR (created before timing starts) and two phases:

1. ingest: ``--batches`` batches committed back to back, one commit per batch, no reader
   running: rows/s, MB/s (logical Arrow bytes), commit latency ("ack") p50/p99.
2. write-to-visible: ``--visible-batches`` further batches in lockstep with a reader in another
   process. When a commit returns, the writer sends the batch's last key to the reader, which
   polls with a brand-new table object each time (nothing cached) and a filter on that key
   until a read returns the row, and sends back the time that read returned; only then does
   the writer commit the next batch. Latency = that time - commit return time, both taken
   with ``time.monotonic`` (CLOCK_MONOTONIC, one clock for all processes of the machine).

The pure-Python pypaimon primary-key writer takes about half a second per commit, so its
ingest phase is capped by ``--pk-python-batches``. Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.batches import digest, last_key, make_batches, percentiles_ms, summarize

PAIMON_DB = "bench"
PAIMON_TABLE = f"{PAIMON_DB}.t"
PAIMON_BUCKETS = "2"  # one bucket per core
PAIMON_NATIVE = {"write.native.enabled": "true", "commit.native.enabled": "true"}
VISIBLE_DEADLINE_S = 60.0


class Writer(Protocol):
    """One open table; ``commit`` writes one batch and makes it visible as one commit."""

    implementation: str

    def commit(self, batch: pa.RecordBatch) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Peer:
    """A system under test: how to open a writer on a new table, how a fresh reader finds a key."""

    name: str
    open_writer: Callable[[Path, pa.Schema], Writer]
    contains: Callable[[Path, int], bool]
    notes: str
    options: Mapping[str, str] = field(default_factory=dict)


class DeltaWriter:
    """deltalake (delta-rs): ``write_deltalake(mode="append")``, one Delta version per batch."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        from deltalake import DeltaTable

        self._uri = str(path)
        self.implementation = "write_deltalake"
        DeltaTable.create(self._uri, schema)

    def commit(self, batch: pa.RecordBatch) -> None:
        from deltalake import write_deltalake

        write_deltalake(self._uri, pa.Table.from_batches([batch]), mode="append")

    def close(self) -> None:
        """Nothing is held open between appends."""


def delta_contains(path: Path, key: int) -> bool:
    """Open the table anew (latest version) and count rows with ``key``."""
    from deltalake import DeltaTable

    dataset = DeltaTable(str(path)).to_pyarrow_dataset()
    return dataset.count_rows(filter=pc.field("key") == key) > 0


class PaimonWriter:
    """pypaimon: a stream write builder on a filesystem-catalog table, one snapshot per batch."""

    def __init__(self, path: Path, schema: pa.Schema, options: Mapping[str, str],
                 primary_keys: list[str] | None) -> None:
        from pypaimon import CatalogFactory, Schema

        catalog = CatalogFactory.create({"warehouse": str(path)})
        catalog.create_database(PAIMON_DB, True)
        paimon_schema = Schema.from_pyarrow_schema(
            schema, primary_keys=primary_keys, options={"file.format": "parquet", **options})
        catalog.create_table(PAIMON_TABLE, paimon_schema, False)
        builder = catalog.get_table(PAIMON_TABLE).new_stream_write_builder()
        self._write = builder.new_write()
        self._commit = builder.new_commit()
        self._identifier = 0
        self.implementation = type(self._write).__name__
        if options.get("write.native.enabled") == "true" and "Native" not in self.implementation:
            raise RuntimeError(f"pypaimon fell back to {self.implementation}: no pypaimon-rust?")

    def commit(self, batch: pa.RecordBatch) -> None:
        self._write.write_arrow_batch(batch)
        self._commit.commit(self._write.prepare_commit(self._identifier), self._identifier)
        self._identifier += 1

    def close(self) -> None:
        self._write.close()
        self._commit.close()


def paimon_contains(path: Path, key: int) -> bool:
    """Open a new catalog and table (latest snapshot) and read rows with ``key``, merged by key."""
    from pypaimon import CatalogFactory

    table = CatalogFactory.create({"warehouse": str(path)}).get_table(PAIMON_TABLE)
    builder = table.new_read_builder()
    builder = builder.with_filter(builder.new_predicate_builder().equal("key", key))
    builder = builder.with_projection(["key"])
    return builder.new_read().to_arrow(builder.new_scan().plan().splits()).num_rows > 0


def _paimon(name: str, options: Mapping[str, str], primary_keys: list[str] | None,
            notes: str) -> Peer:
    def open_writer(path: Path, schema: pa.Schema) -> Writer:
        return PaimonWriter(path, schema, options, primary_keys)

    return Peer(name, open_writer, paimon_contains, notes, options)


NO_FSYNC = "strace: no fsync at all"
DATA_FSYNC = "strace: fsyncs data files, not manifests or snapshots"

PEERS: dict[str, Peer] = {
    peer.name: peer
    for peer in (
        Peer("deltalake", DeltaWriter, delta_contains,
             f"append-only, write_deltalake(mode='append') per batch; {NO_FSYNC}"),
        _paimon("pypaimon-pk", {"bucket": PAIMON_BUCKETS}, ["key"],
                f"primary key, 2 buckets, pure-Python writer (default); {NO_FSYNC}"),
        _paimon("pypaimon-pk-native", {"bucket": PAIMON_BUCKETS, **PAIMON_NATIVE}, ["key"],
                f"primary key, 2 buckets, pypaimon-rust writer+commit; {DATA_FSYNC}"),
        _paimon("pypaimon-append-native", {"bucket": "-1", **PAIMON_NATIVE}, None,
                f"append-only (bucket-unaware), pypaimon-rust writer+commit; {DATA_FSYNC}"),
    )
}


def run_peer(peer: Peer, batches: Sequence[pa.RecordBatch], visible: Sequence[pa.RecordBatch],
             path: Path) -> dict[str, Any]:
    """Both phases for one system on a new table at ``path``; the result dict of ``summarize``."""
    writer = peer.open_writer(path, batches[0].schema)
    try:
        acks = []
        start = time.monotonic()
        for batch in batches:
            begin = time.monotonic()
            writer.commit(batch)
            acks.append(time.monotonic() - begin)
        seconds = time.monotonic() - start
        visibility = measure_visibility(peer, writer, visible, path, last_key(batches[-1]))
    finally:
        writer.close()
    return summarize(peer.name, batches, seconds, acks, **visibility,
                     writer=writer.implementation,
                     options=dict(peer.options), notes=peer.notes)


def measure_visibility(peer: Peer, writer: Writer, batches: Sequence[pa.RecordBatch],
                       path: Path, ingested_key: int) -> dict[str, Any]:
    """Commit ``batches`` in lockstep with a reader process; write-to-visible latency p50/p99.

    The reader first finds ``ingested_key`` (the last row of the ingest phase), which warms it
    up and checks that phase's last commit is visible.
    """
    parent, child = mp.get_context("spawn").Pipe()
    reader = mp.get_context("spawn").Process(target=_reader, args=(peer.name, path, child))
    reader.start()
    try:
        _ask(parent, ingested_key)
        latencies, polls, reads = [], [], []
        for batch in batches:
            writer.commit(batch)
            acked = time.monotonic()
            seen, count, read_s = _ask(parent, last_key(batch))
            latencies.append(seen - acked)
            polls.append(count)
            reads.append(read_s)
    finally:
        if reader.is_alive():
            parent.send(None)
            reader.join(timeout=30)
        reader.terminate()
    return {
        "visible_batches": len(batches),
        **percentiles_ms("visible", latencies),
        **percentiles_ms("visible_read", reads),
        "visible_polls_max": max(polls),
    }


def _ask(conn: Connection, key: int) -> tuple[float, int, float]:
    """Have the reader find ``key``: (time its read returned, polls, that read's seconds)."""
    conn.send(key)
    seen, polls, read_s = conn.recv()
    if seen is None:
        raise TimeoutError(f"key {key} not visible after {VISIBLE_DEADLINE_S} s ({polls} polls)")
    return seen, polls, read_s


def _reader(peer_name: str, path: Path, conn: Connection) -> None:
    """Reader process: for each key received, poll with fresh table objects until it is found."""
    contains = PEERS[peer_name].contains
    while (key := conn.recv()) is not None:
        deadline = time.monotonic() + VISIBLE_DEADLINE_S
        polls, found, read_s = 0, False, 0.0
        while not found and time.monotonic() < deadline:
            begin = time.monotonic()
            found = contains(path, key)
            polls += 1
            read_s = time.monotonic() - begin
        conn.send((time.monotonic() if found else None, polls, read_s))


def run(systems: Sequence[str], rows: int, batches: int, visible_batches: int,
        pk_python_batches: int, root: Path, seed: int = 0) -> dict[str, Any]:
    """Every system in ``systems`` on its own table under ``root``; one JSON-ready dict."""
    workload = make_batches(batches + visible_batches, rows, seed=seed)
    results = []
    for name in systems:
        count = min(batches, pk_python_batches) if name == "pypaimon-pk" else batches
        ingest = workload[:count]
        visible = workload[count:count + visible_batches]
        results.append(run_peer(PEERS[name], ingest, visible, root / name))
    return {
        "rows_per_batch": rows,
        "seed": seed,
        "digest": digest(workload[:batches]),
        "versions": {p: version(p) for p in ("deltalake", "pypaimon", "pypaimon-rust", "pyarrow")},
        "results": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="an empty or new directory")
    parser.add_argument("--rows-per-batch", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--visible-batches", type=int, default=20)
    parser.add_argument("--pk-python-batches", type=int, default=30,
                        help="cap on ingest batches for the slow pure-Python pypaimon PK writer")
    parser.add_argument("--systems", default=",".join(PEERS),
                        help=f"comma-separated subset of {','.join(PEERS)}")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(PEERS)
    if unknown:
        parser.error(f"unknown systems: {sorted(unknown)}")
    args.dir.mkdir(parents=True, exist_ok=True)
    result = run(systems, args.rows_per_batch, args.batches, args.visible_batches,
                 args.pk_python_batches, args.dir, args.seed)
    json.dump(result, sys.stdout, indent=2)
    print(flush=True)
    # deltalake's Rust threads can abort the interpreter's shutdown ("terminate called without
    # an active exception", delta-rs issue 2184) after all work is done: skip that shutdown.
    os._exit(0)


if __name__ == "__main__":
    main()
