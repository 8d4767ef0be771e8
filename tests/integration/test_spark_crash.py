"""Streaming ingest through Spark survives crashes at bad moments, on a real Ray cluster:
the Spark job (driver and JVM) SIGKILLed mid-micro-batch, again and again, and a table
server SIGKILLed while a batch writes; restarted from its checkpoint each time, the job
leaves the table equal to the deduplicated input, exactly, and hudi-rs agrees after a
flush."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.hudirs import hudi_rs_read
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.ray, pytest.mark.slow]
pytest.importorskip("pyspark")
pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[2]
SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("v", pa.float64())])
FILES = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    import memtier

    running = memtier.start_local(str(tmp_path_factory.mktemp("memtier-spark-crash")), table_servers=1,
                                  config={"services.workers": "0"})
    yield running
    running.shutdown()


def _inputs(folder: Path) -> list[pa.Table]:
    """Each file updates half the keys of the one before and adds new ones (ts = file)."""
    folder.mkdir()
    batches = []
    for i in range(FILES):
        ids = list(range(i * 1000, i * 1000 + 2000))
        batch = pa.table({"id": ids, "ts": [i] * len(ids), "city": [("ams", "ber")[k % 2] for k in ids],
                          "v": [float(k + i) for k in ids]}, schema=SCHEMA)
        pq.write_table(batch, folder / f"{i:03d}.parquet")
        batches.append(batch)
    return batches


def _deduplicated(batches: list[pa.Table]) -> pa.Table:
    latest = {row["id"]: row for batch in batches for row in batch.to_pylist()}  # ts grows per file
    return pa.Table.from_pylist([latest[k] for k in sorted(latest)], schema=SCHEMA)


def _start_job(cluster: object, table: str, source: Path, checkpoint: Path, pause: float) -> subprocess.Popen[str]:
    env = {**os.environ, "MEMTIER_CLUSTER_ADDRESS": cluster.address, "PYTHONPATH": str(REPO)}  # type: ignore[attr-defined]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.spark_stream_job", table, str(source), str(checkpoint), str(pause)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        start_new_session=True,  # its own process group: the driver and its JVM die together
    )


def _batch_in_flight(checkpoint: Path) -> int | None:
    """A micro-batch Spark has planned (offsets written) but not committed."""
    if not (checkpoint / "offsets").exists():
        return None
    offsets = {int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*")}
    commits = {int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")}
    pending = sorted(offsets - commits)
    return pending[0] if pending else None


def _kill_group(job: subprocess.Popen[str]) -> None:
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(timeout=60)


def test_killed_spark_jobs_and_table_server_leave_the_deduplicated_input_exactly(
    cluster: object, tmp_path: Path
) -> None:
    client = cluster.client()  # type: ignore[attr-defined]
    table = f"crash_{uuid.uuid4().hex[:6]}"
    client.create_table(table, SCHEMA, record_key="id", ordering_field="ts", partition_fields="city", buckets=2)
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    batches = _inputs(source)
    for delay in (1.0, 2.5):  # kill the job mid-batch, twice, at different points of a batch
        job = _start_job(cluster, table, source, checkpoint, pause=1.0)
        wait_until(lambda: _batch_in_flight(checkpoint) is not None, "a micro-batch in flight", timeout=180)
        time.sleep(delay)
        _kill_group(job)
    job = _start_job(cluster, table, source, checkpoint, pause=1.0)
    wait_until(lambda: _batch_in_flight(checkpoint) is not None, "a micro-batch in flight", timeout=180)
    server_pid = cluster.pids()["ts-0"]  # type: ignore[attr-defined]
    os.kill(server_pid, signal.SIGKILL)  # a table server dies while the batch writes
    out, _ = job.communicate(timeout=600)
    assert job.returncode == 0 and "done" in out, out
    expected = _deduplicated(batches)
    assert client.read(table, "committed").sort_by("id").equals(expected)
    assert client.read(table).sort_by("id").equals(expected)
    client.flush(table)
    path = client.describe(table)["path"]
    assert hudi_rs_read(path).select(SCHEMA.names).sort_by("id").equals(expected)
