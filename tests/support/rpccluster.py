"""A master and table servers served over Arrow Flight in this process, wired as
:mod:`memtier.cluster` wires them but without Ray: every call between client, master and
table servers crosses a real RPC connection."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from memtier.certificates import CertificateFiles
from memtier.client import Client
from memtier.config import TableServerConfig
from memtier.io import join
from memtier.master.master import Master
from memtier.master.service import MasterProxy, MasterService
from memtier.rpc import RpcServer
from memtier.rpc.tls import ServerIdentity
from memtier.tableserver.server import TableServer
from memtier.tableserver.service import TableServerProxy, TableServerService
from tests.support.inprocess import InProcessCluster


@dataclass
class RpcCluster:
    root: str
    config: TableServerConfig = field(default_factory=TableServerConfig)
    host: str = "127.0.0.1"
    token: str | None = None
    #: Served over TLS with these (and every connection checks them against their CA).
    tls: CertificateFiles | None = None
    servers: dict[str, TableServer] = field(default_factory=dict)
    endpoints: dict[str, RpcServer] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.master = Master(self.root, connect=lambda _server_id, location: TableServerProxy(location, **self.access))
        self.master_endpoint = RpcServer(
            MasterService(self.master), host=self.host, token=self.token, tls=self.identity
        ).start()

    @property
    def access(self) -> dict[str, str | None]:
        """What a proxy needs to reach this cluster's servers: the token and the CA."""
        return {"token": self.token, "tls_ca": None if self.tls is None else self.tls.ca}

    @property
    def identity(self) -> ServerIdentity | None:
        return None if self.tls is None else ServerIdentity(self.tls.certificate, self.tls.key)

    @property
    def address(self) -> str:
        return self.master_endpoint.location

    @property
    def wal_root(self) -> str:
        return join(self.root, "_memtier", "wal")

    def add_server(self, server_id: str) -> TableServer:
        link = MasterProxy(self.address, **self.access)
        server = TableServer(server_id, link, self.wal_root, config=self.config)
        endpoint = RpcServer(TableServerService(server), host=self.host, token=self.token, tls=self.identity).start()
        self.servers[server_id], self.endpoints[server_id] = server, endpoint
        server.join(endpoint.location)
        return server

    def client(self) -> Client:
        """A client over RPC, carrying the cluster's token (and CA)."""
        return Client(
            MasterProxy(self.address, **self.access),
            lambda _server_id, location: TableServerProxy(location, **self.access),
        )

    def close(self) -> None:
        for endpoint in self.endpoints.values():
            endpoint.stop()
        self.master_endpoint.stop()
        for server in self.servers.values():
            server.close()


#: The two ways the integration suites run a cluster without Ray: calls in process, or over RPC.
CLUSTER_KINDS = ("inprocess", "rpc")


@contextmanager
def two_servers(kind: str, root: str, config: TableServerConfig | None = None) -> Iterator[InProcessCluster | RpcCluster]:
    """A cluster of ``kind`` (one of :data:`CLUSTER_KINDS`) with table servers ``a`` and ``b``."""
    cluster = (InProcessCluster if kind == "inprocess" else RpcCluster)(root, config or TableServerConfig())
    try:
        cluster.add_server("a")
        cluster.add_server("b")
        yield cluster
    finally:
        cluster.close()
