"""The slow part of the doc test (tests/unit/test_docs.py checks every block; this runs the
python blocks that need a local cluster or Spark, and the SQL blocks Trino runs): each
python block is executed, in a temporary working directory, with what its directive names
(tests/support/docblocks.py), and whatever cluster or streaming query it leaves running is
stopped afterwards; each SQL block that reads the ``memtier`` catalog runs on a real Trino
(the session's ``trino`` fixture) over the README's ``orders`` table, synced into its
metastore, and must return the rows memtier computes. The Spark SQL block (Hudi's Spark
bundle over a Hive Metastore) is only checked, by the fast part. A block that fails fails
its test case, named ``FILE:LINE``."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.support.docblocks import Block, all_blocks

pytestmark = [pytest.mark.slow, pytest.mark.ray]

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("city", pa.string()), ("amount", pa.float64())])
REPO = Path(__file__).resolve().parents[2]
RAY_BLOCKS = [b for b in all_blocks() if b.kind == "python" and b.mode == "ray"]
SPARK_BLOCKS = [b for b in all_blocks() if b.kind == "python" and b.mode == "spark"]
TRINO_BLOCKS = [b for b in all_blocks() if b.kind == "sql" and " memtier.default." in b.code]


def _rows(ids: range, ts: int) -> pa.Table:
    cities = ["oslo", "rome", "ams"]
    return pa.table({"id": list(ids), "ts": [ts] * len(ids), "city": [cities[i % 3] for i in ids],
                     "amount": [float(i) for i in ids]}, schema=SCHEMA)


def _orders_cluster(path: Path) -> tuple[Any, Any]:
    """A local cluster with the README's ``orders`` table, rows in it, and a client."""
    import memtier

    cluster = memtier.start_local(str(path), table_servers=1, config={"services.workers": "1"})
    client = memtier.connect(cluster.address)
    client.create_table("orders", SCHEMA, record_key="id", ordering_field="ts", partition_fields="city", buckets=4)
    client.write("orders", _rows(range(100), 1))
    return cluster, client


def _stop_clusters() -> None:
    from memtier.cluster import running_cluster

    while (cluster := running_cluster()) is not None:
        cluster.shutdown()


def _execute(block: Block, workdir: Path, namespace: dict[str, Any]) -> None:
    script = workdir / "block.py"
    script.write_text(block.code)
    try:
        runpy.run_path(str(script), init_globals=namespace, run_name="__doc__")
    except Exception as e:
        pytest.fail(f"{block.where} ({block.kind} block) raised {type(e).__name__}: {e}")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    _stop_clusters()


@pytest.mark.parametrize("block", RAY_BLOCKS, ids=lambda b: b.where)
def test_ray_block(block: Block, workdir: Path) -> None:
    namespace: dict[str, Any] = {}
    if block.fixture == "orders":
        import memtier

        cluster, client = _orders_cluster(workdir / "fixture-data")
        namespace = {"memtier": memtier, "pa": pa, "schema": SCHEMA, "cluster": cluster, "client": client}
    _execute(block, workdir, namespace)


#: Runs a spark block in its own process, as a user's Spark job runs: its SparkSession's JVM
#: resolves relative paths against the block's working directory, and the cluster is found
#: through MEMTIER_CLUSTER_ADDRESS as the README says.
_SPARK_RUNNER = """
import runpy
import subprocess
import sys
from tests.support.spark import local_session
spark = local_session("memtier-doc-block")
try:
    runpy.run_path("block.py", init_globals={"spark": spark}, run_name="__doc__")
finally:
    for query in spark.streams.active:
        query.stop()
    spark.stop()
"""


@pytest.mark.spark
@pytest.mark.parametrize("block", SPARK_BLOCKS, ids=lambda b: b.where)
def test_spark_block(block: Block, workdir: Path) -> None:
    """With a running cluster holding ``orders`` and JSON rows of orders in ``incoming/``
    and ``history/``, the block runs in a Python process of its own with ``spark`` set."""
    pytest.importorskip("pyspark")
    cluster, _ = _orders_cluster(workdir / "fixture-data")
    for folder, ids, ts in (("incoming", range(50, 150), 2), ("history", range(1000, 1100), 0)):
        (workdir / folder).mkdir()
        (workdir / folder / "part-0.json").write_text(
            "".join(json.dumps(row) + "\n" for row in _rows(ids, ts).to_pylist()))
    (workdir / "block.py").write_text(block.code)
    env = {**os.environ, "MEMTIER_CLUSTER_ADDRESS": cluster.address, "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-c", _SPARK_RUNNER], cwd=workdir, env=env, capture_output=True,
                         text=True, timeout=600)
    if run.returncode != 0:
        pytest.fail(f"{block.where} ({block.kind} block) failed: {run.stderr[-3000:]}")


@pytest.fixture(scope="module")
def trino_orders(trino: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, list[dict[str, Any]]]:
    """The session's Trino with the README's ``orders`` table synced into its metastore
    (written once: its first write is base files, which Trino 476 reads), and its rows."""
    from memtier.catalog import sync_table
    from memtier.hudi import HudiTable

    table = HudiTable.create(str(tmp_path_factory.mktemp("doc-trino") / "orders"), SCHEMA, record_key="id",
                             ordering_field="ts", partition_fields="city", buckets=2)
    table.write(_rows(range(30), 1))
    sync_table(table.meta, trino.metastore_handle(), name="orders")
    return trino, table.read().to_pylist()


@pytest.mark.parametrize("block", TRINO_BLOCKS, ids=lambda b: b.where)
def test_trino_block(block: Block, trino_orders: tuple[Any, list[dict[str, Any]]]) -> None:
    """The block's query over ``orders`` returns what memtier's read of the table gives it."""
    trino, rows = trino_orders
    try:
        got = sorted(tuple(row) for row in trino.query(block.code.strip().rstrip(";")))
    except Exception as e:
        pytest.fail(f"{block.where} ({block.kind} block) failed on Trino: {e}")
    assert got == [("oslo", sum(r["amount"] for r in rows if r["city"] == "oslo"))], block.where


def test_the_blocks_were_found() -> None:
    assert len(RAY_BLOCKS) >= 3 and len(SPARK_BLOCKS) >= 2 and len(TRINO_BLOCKS) >= 2, (
        RAY_BLOCKS, SPARK_BLOCKS, TRINO_BLOCKS)
    assert (REPO / "docs").is_dir()
