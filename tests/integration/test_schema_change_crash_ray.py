"""SIGKILL during a schema change, on real Ray actors: while a stream writes, a column is
added and a table server's (or the master's) process is killed as the change is made, and
again once rows of the new schema are acknowledged (the WAL then holds blocks of both
schemas). After the restarts every acknowledged row reads back exactly once under the
right schema (the new column null for rows written before it), from memtier and, after a
flush, from hudi-rs."""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from memtier.errors import MemtierError
from memtier.io import join
from tests.support.hudirs import hudi_rs_read
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ray = pytest.importorskip("ray")

OLD = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("p", pa.string()), ("v", pa.string())])
NEW = OLD.append(pa.field("note", pa.string()))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    import memtier

    running = memtier.start_local(str(tmp_path_factory.mktemp("memtier-schema-crash")), table_servers=2,
                                  config={"services.workers": "0"})
    yield running
    running.shutdown()


def _kill(cluster: Any, name: str) -> None:
    """SIGKILL an actor's worker process and wait until Ray has started it again."""
    before = cluster.pids()[name]
    os.kill(before, signal.SIGKILL)
    wait_until(lambda: cluster.pids()[name] != before, f"{name} to restart")


class Stream:
    """Batches of fresh keys, written by a thread until stopped: of the old schema until
    :attr:`new` is set, then of the new one; each acknowledged row recorded as the new
    schema reads it."""

    def __init__(self, client: Any, table: str) -> None:
        self.client, self.table = client, table
        self.new, self.stop = threading.Event(), threading.Event()
        self.acked: dict[int, dict[str, Any]] = {}
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        next_key = 0
        try:
            while not self.stop.is_set():
                schema = NEW if self.new.is_set() else OLD
                keys = range(next_key, next_key + 50)
                rows = [{"id": k, "ts": 1, "p": f"p{k % 2}", "v": f"v{k}",
                         **({"note": f"n{k}"} if schema is NEW else {})} for k in keys]
                self.client.write(self.table, pa.Table.from_pylist(rows, schema=schema))
                self.acked.update({r["id"]: {"note": None, **r} for r in rows})
                next_key += 50
        except BaseException as e:  # surfaced by the test
            self.errors.append(e)

    def more(self, count: int, what: str) -> None:
        """Wait for ``count`` more acknowledged rows."""
        start = len(self.acked)
        wait_until(lambda: len(self.acked) >= start + count or self.errors, what)
        assert not self.errors, self.errors

    def end(self) -> list[dict[str, Any]]:
        self.stop.set()
        self.thread.join(timeout=120)
        assert not self.errors, self.errors
        return [{c: self.acked[k][c] for c in NEW.names} for k in sorted(self.acked)]


@pytest.mark.parametrize("victim", ["ts-0", "memtier-master"])
def test_sigkill_during_a_schema_change_loses_no_acknowledged_row(cluster: Any, victim: str, tmp_path: Path) -> None:
    client = cluster.client()
    table = f"evolving_{victim.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
    path = join(cluster.path, "tables", table)
    client.create_table(table, OLD, record_key="id", ordering_field="ts", partition_fields="p", buckets=4, path=path)
    stream = Stream(client, table)
    stream.more(1000, "the stream to get going")

    failed: list[BaseException] = []

    def alter() -> None:
        try:
            cluster.client().alter_table(table, add_columns=[("note", pa.string())])
        except MemtierError as e:  # the master died under it: whether it landed is read below
            failed.append(e)

    altering = threading.Thread(target=alter)
    altering.start()
    _kill(cluster, victim)  # as the change is made
    altering.join(timeout=120)
    assert not altering.is_alive()
    if client.describe(table)["schema_version"] == 0:  # killed before the change committed
        assert failed, "the alter returned, yet the table kept its schema"
        client.alter_table(table, add_columns=[("note", pa.string())])
    described = client.describe(table)
    assert described["schema_version"] == 1 and pa.ipc.read_schema(pa.py_buffer(described["schema"])) == NEW

    stream.new.set()  # the producer sends the new column
    stream.more(1000, "rows of the new schema")
    _kill(cluster, victim)  # its WAL (or the master's state) now spans both schemas
    stream.more(1000, "writes to go on after the second restart")
    expected = stream.end()

    found = client.read(table).select(NEW.names).sort_by("id").to_pylist()
    assert len(found) == len(expected), f"{len(expected)} rows acknowledged, {len(found)} read"
    assert found == expected
    client.flush(table)
    assert client.read(table).select(NEW.names).sort_by("id").to_pylist() == expected
    assert hudi_rs_read(path).select(NEW.names).sort_by("id").to_pylist() == expected
