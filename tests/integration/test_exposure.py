"""Who can reach a cluster: Flight endpoints bind to loopback unless configured
otherwise; bound elsewhere they require TLS and a shared token, and calls without the
token are refused."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pyarrow as pa
import pytest

from memtier.certificates import CertificateFiles
from memtier.client import Client
from memtier.config import ClusterConfig, load
from memtier.errors import AuthenticationError, InvalidArgumentError
from memtier.master.service import MasterProxy
from memtier.rpc import RpcServer
from memtier.tableserver.service import TableServerProxy
from tests.support.rpccluster import RpcCluster

TOKEN = "exposure-test-token"
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


class Echo:
    """A service that answers every call."""

    def handle_action(self, name: str, request: dict) -> dict:
        return {"name": name}

    def handle_put(self, request: dict, data: pa.Table) -> dict:
        return {"rows": data.num_rows}

    def handle_get(self, request: dict) -> pa.Table:
        return pa.table({"x": [1]})


def non_loopback_address() -> str | None:
    """This machine's address on its default route (no packet is sent), if it has one
    other than loopback that a server can bind."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: only picks the outgoing interface
            address = probe.getsockname()[0]
        except OSError:
            return None
    if address.startswith("127.") or address == "0.0.0.0":
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound:
        try:
            bound.bind((address, 0))
        except OSError:
            return None
    return address


@pytest.fixture(scope="module")
def address() -> str:
    found = non_loopback_address()
    if found is None:
        pytest.skip("this machine has no non-loopback IPv4 address to bind")
    return found


@pytest.fixture
def exposed(tmp_path, address: str, pki: CertificateFiles) -> Iterator[RpcCluster]:
    """A master and a table server bound to the non-loopback address, with TLS and a token."""
    cluster = RpcCluster(str(tmp_path), host=address, token=TOKEN, tls=pki)
    cluster.add_server("a")
    yield cluster
    cluster.close()


def client_with(cluster: RpcCluster, token: str | None) -> Client:
    ca = cluster.access["tls_ca"]
    return Client(
        MasterProxy(cluster.address, token=token, tls_ca=ca),
        lambda _server_id, location: TableServerProxy(location, token=token, tls_ca=ca),
    )


def test_the_cluster_really_listens_on_the_non_loopback_address(exposed: RpcCluster, address: str) -> None:
    assert exposed.address.startswith(f"grpc+tls://{address}:")
    assert exposed.endpoints["a"].location.startswith(f"grpc+tls://{address}:")


def test_the_right_token_works(exposed: RpcCluster) -> None:
    client = client_with(exposed, TOKEN)
    client.create_table("t", SCHEMA, record_key="id", buckets=2)
    client.write("t", pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA))
    assert sorted(client.read("t").column("id").to_pylist()) == [1, 2]
    assert TableServerProxy(exposed.endpoints["a"].location, **exposed.access).ping() == "a"


@pytest.mark.parametrize("token", [None, "wrong-token"], ids=["no-token", "wrong-token"])
def test_calls_without_the_right_token_are_refused(exposed: RpcCluster, token: str | None) -> None:
    owner = client_with(exposed, TOKEN)
    owner.create_table("t", SCHEMA, record_key="id", buckets=2)
    master = MasterProxy(exposed.address, token=token, tls_ca=exposed.access["tls_ca"])
    server = TableServerProxy(exposed.endpoints["a"].location, token=token, tls_ca=exposed.access["tls_ca"])
    data = pa.table({"id": [7], "v": ["x"]}, schema=SCHEMA)
    refused = [
        master.list_tables,
        lambda: master.drop_table("t", purge=True),
        lambda: master.begin_txn("t", "w", "b"),
        server.ping,
        lambda: server.write("t", data, producer_seq=1),
        lambda: server.read("t", as_of_instant=None),
        lambda: server.release("t"),
        lambda: client_with(exposed, token).write("t", data),
    ]
    for call in refused:
        with pytest.raises(AuthenticationError, match="refused"):
            call()
    # nothing above had any effect
    assert owner.list_tables() == ["t"]
    assert owner.read("t").num_rows == 0
    assert exposed.servers["a"].owned("t") == {0, 1}


@pytest.mark.parametrize("host", ["address", "0.0.0.0", "::", "memtier-host.example"])
def test_binding_beyond_loopback_without_a_token_is_refused(host: str, address: str) -> None:
    host = address if host == "address" else host
    with pytest.raises(InvalidArgumentError, match=f"refusing to serve on {host} without a shared token"):
        RpcServer(Echo(), host=host)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1"])
def test_loopback_needs_no_token(host: str) -> None:
    RpcServer(Echo(), host=host)  # constructing binds nothing: accepted


def test_the_default_bind_is_loopback_only(address: str) -> None:
    with RpcServer(Echo()) as server:
        assert server.location == f"grpc://127.0.0.1:{server.port}"
        with socket.create_connection(("127.0.0.1", server.port), timeout=5):
            pass
        with pytest.raises(ConnectionRefusedError):  # not reachable on the other address
            socket.create_connection((address, server.port), timeout=5).close()


def test_the_cluster_config_defaults_to_loopback_and_no_token() -> None:
    config = load(ClusterConfig, {}, environ={})
    assert config.host == "127.0.0.1" and config.token is None
    assert ClusterConfig().host == "127.0.0.1"
