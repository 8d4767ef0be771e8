"""A whole cluster on Ray with TLS: ``start_local`` with the ``cluster.tls.*`` settings and a
token. Every connection runs over TLS (the client to the master and the table servers, the
table servers to the master and the master to them, the table-service pool to the master,
the CLI, the metrics endpoints), through a compaction the pool runs and a table server
SIGKILLed and restarted by Ray; a clear-text client and a client trusting another CA are
refused at once, naming what to change."""

from __future__ import annotations

import os
import signal
import ssl
import urllib.request
from collections.abc import Iterator

import pyarrow as pa
import pytest

from memtier.certificates import CertificateFiles
from memtier.cli import main
from memtier.errors import TlsError
from tests.support.hudirs import hudi_rs_read, rows
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ray = pytest.importorskip("ray")

TOKEN = "tls-ray-token"
SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("v", pa.string())])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pki: CertificateFiles) -> Iterator[object]:
    import memtier

    root = tmp_path_factory.mktemp("memtier-tls")
    running = memtier.start_local(str(root), table_servers=2, config={
        **pki.settings(), "cluster.token": TOKEN,
        "tableserver.flush-interval": "200ms", "tableserver.block-max-age": "200ms",
    })
    yield running
    running.shutdown()


def batch(ids: range, ts: int) -> pa.Table:
    return pa.table({"id": list(ids), "ts": [ts] * len(ids), "v": [f"v{i}-{ts}" for i in ids]}, schema=SCHEMA)


def test_every_connection_of_a_cluster_on_ray_runs_over_tls(cluster, pki: CertificateFiles, capsys) -> None:
    assert cluster.address.startswith("grpc+tls://127.0.0.1:")
    client = cluster.client()
    status = client.status()
    assert len(status["servers"]) == 2
    assert all(s["location"].startswith("grpc+tls://") for s in status["servers"].values())
    context = ssl.create_default_context(cafile=pki.ca)
    for url in [status["metrics_url"], *(s["metrics_url"] for s in status["servers"].values())]:
        assert url.startswith("https://")
        with urllib.request.urlopen(url, timeout=10, context=context) as response:
            assert b"memtier_" in response.read()

    client.create_table("t", SCHEMA, record_key="id", ordering_field="ts", buckets=4)
    client.write("t", batch(range(0, 1000), 1))
    with client.transaction("t", batch_id="b-1") as tx:
        tx.write(batch(range(500, 1500), 2))
    assert client.lookup("t", [7, 700]).column("ts").to_pylist() == [1, 2]
    client.flush("t")  # the table servers commit through the master
    client.write("t", batch(range(1000, 2000), 3))
    client.flush("t")
    expected = rows(client.read("t"))
    assert len(expected) == 2000
    done = client.compact("t")  # planned by the master, run by the pool actor over TLS
    assert done["state"] == "completed", done
    assert rows(client.read("t", mode="read_optimized")) == expected
    assert rows(hudi_rs_read(os.path.join(cluster.path, "tables", "t"))) == expected

    before = cluster.pids()["ts-0"]  # a restarted table server joins the master over TLS again
    os.kill(before, signal.SIGKILL)
    wait_until(lambda: cluster.pids()["ts-0"] != before, "ts-0 to restart")
    client.write("t", batch(range(2000, 2100), 4))
    assert len(rows(client.read("t"))) == 2100

    assert main(["status", "--address", cluster.address, "--token", TOKEN, "--tls-ca", pki.ca]) == 0
    assert "grpc+tls://" in capsys.readouterr().out


def test_a_clear_text_client_is_refused(cluster) -> None:
    import memtier

    plain = cluster.address.replace("grpc+tls://", "grpc://")
    with pytest.raises(TlsError, match=f"{plain} speaks TLS and this client spoke clear text to it"):
        memtier.connect(plain, token=TOKEN).list_tables()


def test_a_client_trusting_another_ca_is_refused(cluster, other_pki: CertificateFiles, capsys) -> None:
    import memtier

    with pytest.raises(TlsError, match="presented a certificate this client does not trust"):
        memtier.connect(cluster.address, token=TOKEN, tls_ca=other_pki.ca).list_tables()
    assert main(["status", "--address", cluster.address, "--token", TOKEN, "--tls-ca", other_pki.ca]) == 2
    assert "does not trust" in capsys.readouterr().err

