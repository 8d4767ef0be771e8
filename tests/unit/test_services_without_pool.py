"""A cluster started without a table-service pool (``services.workers=0``) plans no
compaction or clean on its own: nothing would execute it, and a compaction plan left
pending forever moves later log files into a slice other Hudi readers do not see yet."""

from pathlib import Path

import pyarrow as pa

from memtier.master.master import Master
from tests.support.inprocess import InProcessCluster


def _compaction_due(tmp_path: Path, services: dict[str, str]) -> Master:
    cluster = InProcessCluster(str(tmp_path), services={"services.compaction-log-files": "1", **services})
    cluster.add_server("ts-0")
    client = cluster.client()
    client.create_table("t", pa.schema([("id", pa.int64()), ("ts", pa.int64())]), record_key="id",
                        ordering_field="ts", buckets=1)
    for ts in (1, 2):
        client.write("t", pa.table({"id": [1, 2], "ts": [ts, ts]}))
        client.flush("t")
    cluster.master.check_services()
    return cluster.master


def test_without_a_pool_nothing_is_planned(tmp_path: Path) -> None:
    master = _compaction_due(tmp_path, {"services.workers": "0"})
    assert master.services.status("t")["tasks"] == []


def test_with_a_pool_the_due_compaction_is_planned(tmp_path: Path) -> None:
    master = _compaction_due(tmp_path, {})
    assert [t["kind"] for t in master.services.status("t")["tasks"]] == ["compaction"]
