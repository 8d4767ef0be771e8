"""A whole memtier cluster as plain objects in this process: the master, table servers
and a client wired directly (no Ray, no RPC). The scenario suite runs against it and,
unchanged, against a real Ray cluster."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from memtier.client import Client
from memtier.compaction.worker import ServiceWorker
from memtier.config import TableServerConfig, WalConfig
from memtier.io import join
from memtier.master.master import Master
from memtier.tableserver.server import TableServer

#: The master's default heartbeat timeout.
HEARTBEAT_TIMEOUT_S = 5.0


@dataclass
class InProcessCluster:
    root: str
    config: TableServerConfig = field(default_factory=TableServerConfig)
    services: dict[str, str] = field(default_factory=dict)  # services.* settings of the master
    catalog: dict[str, str] = field(default_factory=dict)  # catalog.* settings of the master
    servers: dict[str, TableServer] = field(default_factory=dict)
    generations: dict[str, int] = field(default_factory=dict)
    clock: Callable[[], float] = time.time  # the master's (heartbeats, timeouts)
    wal: str | None = None  # the table servers' WAL root (default: under ``root``)
    wal_config: WalConfig | None = None  # the table servers' WAL settings (default: the defaults)

    def __post_init__(self) -> None:
        self.master = self._new_master()

    def _new_master(self) -> Master:
        return Master(self.root, connect=lambda server_id, _location: self.servers[server_id],
                      services=self.services, catalog=self.catalog, clock=self.clock, wal_root=self.wal_root)

    @property
    def wal_root(self) -> str:
        return self.wal or join(self.root, "_memtier", "wal")

    def location(self, server_id: str) -> str:
        return f"inprocess://{server_id}/{self.generations.get(server_id, 0)}"

    def add_server(self, server_id: str) -> TableServer:
        """Start a table server (a restarted one gets a new location, as after a real restart)."""
        self.generations[server_id] = self.generations.get(server_id, -1) + 1
        server = TableServer(server_id, self.master, self.wal_root, config=self.config, wal_config=self.wal_config)
        self.servers[server_id] = server
        server.join(self.location(server_id))
        return server

    def run_service(self, table: str, kind: str = "compaction", **options: object) -> None:
        """Plan a table service of ``table`` on the master and run it to completion here."""
        self.plan_service(table, kind, **options)
        self.run_planned_service()

    def plan_service(self, table: str, kind: str = "compaction", **options: object) -> None:
        """Plan a table service of ``table`` on the master (it is pending until run)."""
        assert self.master.schedule_service(table, kind, **options) is not None, kind

    def run_planned_service(self) -> None:
        """Run the next planned table service to completion in this process."""
        done = ServiceWorker("svc-0", self.master).run_once()
        assert done is not None and done["state"] == "completed", done

    def restart_server(self, server_id: str) -> TableServer:
        """The server dies (memory lost, WAL files left as they are) and comes back."""
        self.servers.pop(server_id).close()
        return self.add_server(server_id)

    def restart_master(self, *, rejoin: Collection[str] | None = None) -> Master:
        """A new master on the same state; the servers in ``rejoin`` (all by default)
        register with it (the others are silent, e.g. paused)."""
        self.master = self._new_master()
        for server_id, server in self.servers.items():
            server._master = self.master  # the servers reconnect to the new master
            if rejoin is None or server_id in rejoin:
                server.join(self.location(server_id))
        return self.master

    def take_for_dead(self, server_id: str) -> None:
        """``server_id`` stays silent past the heartbeat timeout while the others report:
        the master moves its buckets (fencing its WAL streams first). Needs a ``clock``
        the test moves (:class:`~tests.support.clock.ManualClock`)."""
        advance = getattr(self.clock, "advance", None)
        assert advance is not None, "taking a server for dead needs a ManualClock"
        advance(HEARTBEAT_TIMEOUT_S + 1)
        for other, server in self.servers.items():
            if other != server_id:
                server.heartbeat(self.location(other))
        assert self.master.check_servers() == [server_id]
        for table in self.master.list_tables():
            routing = self.master.describe_table(table)["routing"]
            assert server_id not in routing.values(), routing

    def client(self) -> Client:
        return Client(self.master, lambda server_id, _location: self.servers[server_id])

    def close(self) -> None:
        for server in self.servers.values():
            server.close()
