"""A multi-node Ray cluster simulated on this machine: table servers placed on different
nodes; removing a node moves its buckets to the surviving server, which recovers them
from the WAL with nothing lost."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.scenario import SCHEMA
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ray = pytest.importorskip("ray")


@pytest.fixture
def ray_nodes() -> Iterator[object]:
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="memtier", log_to_driver=False)
    yield cluster, workers
    ray.shutdown()
    cluster.shutdown()


def test_removing_a_node_moves_its_buckets_to_the_survivor(ray_nodes: object, tmp_path: Path) -> None:
    import memtier

    nodes, workers = ray_nodes  # type: ignore[misc]
    memtier_cluster = memtier.start(
        str(tmp_path), table_servers=2, pin_to_nodes=True,
        config={"cluster.heartbeat-timeout": "3s"},
    )
    try:
        placement = {
            name: ray.get(actor.node_id.remote()) for name, actor in memtier_cluster.table_servers.items()
        }
        assert len(set(placement.values())) == 2, f"table servers share a node: {placement}"
        client = memtier_cluster.client()
        table = f"nodes_{uuid.uuid4().hex[:6]}"
        client.create_table(table, SCHEMA, record_key="id", ordering_field="ts", partition_fields="p", buckets=4)
        keys = list(range(2000))
        batch = pa.table({"id": keys, "ts": [1] * len(keys), "p": [f"p{k % 2}" for k in keys],
                          "v": [f"v{k}" for k in keys]}, schema=SCHEMA)
        client.write(table, batch)
        routing = client.describe(table)["routing"]
        victim_node = next(w for w in workers if w.node_id in placement.values())
        victim = next(name for name, node in placement.items() if node == victim_node.node_id)
        survivor = next(name for name in placement if name != victim)
        assert victim in routing.values() and survivor in routing.values()

        nodes.remove_node(victim_node)  # type: ignore[attr-defined]
        wait_until(lambda: set(client.describe(table)["routing"].values()) == {survivor},
                   "the survivor to take every bucket", timeout=90.0)
        got = client.read(table, columns=["id", "v"])
        assert sorted(got.column("id").to_pylist()) == keys, "rows lost with the node"
        more = pa.table({"id": [5000], "ts": [1], "p": ["p0"], "v": ["after"]}, schema=SCHEMA)
        client.write(table, more)
        assert client.lookup(table, [5000]).column("v").to_pylist() == ["after"]
    finally:
        memtier_cluster.shutdown()
