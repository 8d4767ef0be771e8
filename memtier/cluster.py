"""Running memtier on Ray: the only module that imports ``ray``.

The master and each table server are named, restartable Ray actors: thin shells around
the plain core classes that serve them over Arrow Flight and run their periodic work.
A restarted table server starts empty and recovers its unflushed blocks from the WAL
before it serves (the master hands it back its buckets when it re-registers); a
restarted master reloads its state file and binds the same port, so every client and
server finds it again.

``start_local(path)`` runs an embedded cluster on this machine; ``start(path,
address=...)`` places one on an existing Ray cluster, table servers spread over nodes.
``memtier.connect()`` talks to either over Flight, with no Ray needed in the client.
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memtier.client import Client
from memtier.compaction.worker import ServiceWorker
from memtier.config import CatalogConfig, ClusterConfig, ServicesConfig, TableServerConfig, WalConfig, load
from memtier.errors import InvalidArgumentError, MemtierError, RpcError
from memtier.gcpauses import freeze_startup, watch_pauses
from memtier.io import join, read_gently
from memtier.liveness import PauseWatch
from memtier.master.master import Master
from memtier.master.service import MasterProxy, MasterService
from memtier.metrics import master_metrics, serve_metrics, table_server_metrics
from memtier.placement import available, background, describe, pin, server_cpus, service_cpus
from memtier.rpc import RpcServer
from memtier.rpc.tls import ServerIdentity
from memtier.tableserver.flusher import ProcessFlusher
from memtier.tableserver.memory import PROCESS_ENV, return_freed_memory
from memtier.tableserver.server import TableServer
from memtier.tableserver.service import TableServerProxy, TableServerService

__all__ = ["LocalCluster", "connect", "start", "start_local"]

log = logging.getLogger(__name__)

NAMESPACE = "memtier"
MASTER_NAME = "memtier-master"
#: Hosts that bind every interface: a process serving on one advertises its node's address.
_WILDCARDS = ("0.0.0.0", "::", "")
#: How often an idle table-service actor asks the master for work.
_SERVICE_POLL_S = 0.5


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as e:  # pragma: no cover - depends on the install
        raise MemtierError("running a cluster needs Ray: pip install 'memtier[ray]'") from e
    return ray


class _Periodic:
    """Calls ``fn`` every ``interval`` seconds on a daemon thread, logging failures."""

    def __init__(self, name: str, interval: float, fn: Callable[[], Any]) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval, fn), name=name, daemon=True)
        self._thread.start()

    def _run(self, interval: float, fn: Callable[[], Any]) -> None:
        while not self._stop.wait(interval):
            try:
                fn()
            except Exception:
                log.exception("periodic %s failed", self._thread.name)

    def stop(self) -> None:
        self._stop.set()


# == actor shells =========================================================================


def _log_at(level: str) -> None:
    """This process's memtier loggers at ``level`` (``cluster.log-level``), each line with
    its time: Ray keeps an actor's output in its worker log."""
    logger = logging.getLogger("memtier")
    logger.setLevel(level)
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False


class MasterShell:
    """The master actor: a :class:`Master` served over Flight, watching its servers."""

    def __init__(self, root: str, port: int, cluster: Mapping[str, str],
                 storage_options: Mapping[str, str] | None = None,
                 services: Mapping[str, str] | None = None,
                 catalog: Mapping[str, str] | None = None) -> None:
        config = load(ClusterConfig, cluster)
        _log_at(config.log_level)
        token, tls_ca = config.token, config.tls_ca
        self.master = Master(
            root,
            connect=lambda _server_id, location: TableServerProxy(location, token=token, tls_ca=tls_ca),
            storage_options=storage_options,
            wal_root=wal_root(root, config),
            heartbeat_timeout=config.heartbeat_timeout.total_seconds(),
            writer_lease=config.writer_lease.total_seconds(),
            services=services,
            catalog=catalog,
        )
        tls, advertise = identity(config), _advertised(config.host)
        self.rpc = RpcServer(MasterService(self.master), host=config.host, port=port, token=token,
                             tls=tls, advertise=advertise).start()
        self.metrics = serve_metrics(lambda: master_metrics(self.master.status()), host=config.host,
                                     tls=tls, advertise=advertise)
        self.master.metrics_url = self.metrics.url
        # a pause of a quarter of the heartbeat timeout: the servers' silence across it is not theirs
        self._pauses = PauseWatch(config.heartbeat_timeout.total_seconds() / 4, self.master.resumed)
        self._monitor = _Periodic("memtier-master-monitor", 1.0, self._watch)

    def _watch(self) -> None:
        self._pauses.check()  # a pause just ended is noted before any silence is judged
        self.master.check_servers()
        self.master.rebalance()
        self.master.check_services()
        self.master.check_commits()

    def location(self) -> str:
        return self.rpc.location

    def pid(self) -> int:
        return os.getpid()


_PR_SET_THP_DISABLE = 41


def _without_transparent_huge_pages() -> None:
    """Turn transparent huge pages off for this process: the allocator returns freed
    pages and takes them back all the time on the write path, and each time the kernel
    zeroes a whole 2 MB page (16% of a table server's CPU in `perf`; bench/RESULTS.md)."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0)


class TableServerShell:
    """A table-server actor: a :class:`TableServer` served over Flight, reporting to the
    master and doing its periodic work (sealing, flushing, evicting). Heartbeats have a
    thread of their own: a flush that outlasts the heartbeat timeout (a large backlog on a
    busy machine) must not make the master take the server for dead. The process runs on
    ``cluster.server-cpus``, its flush worker on ``cluster.service-cpus``."""

    def __init__(self, server_id: str, master_location: str, wal_root: str,
                 cluster: Mapping[str, str], server: Mapping[str, str] | None = None,
                 storage_options: Mapping[str, str] | None = None) -> None:
        _without_transparent_huge_pages()
        return_freed_memory()
        config = load(ClusterConfig, cluster)
        _log_at(config.log_level)
        cpus = available()
        self.cpus = pin(server_cpus(config.server_cpus, config.service_cpus, cpus))
        flush_cpus = service_cpus(config.service_cpus, cpus)
        self.server_id = server_id
        server_config = load(TableServerConfig, server or {})
        master = MasterProxy(master_location, token=config.token, tls_ca=config.tls_ca)
        self.server = TableServer(server_id, master, wal_root,
                                  config=server_config, wal_config=load(WalConfig, server or {}),
                                  flush_cpus=flush_cpus,
                                  wal_storage_options=storage_options if "://" in wal_root else None)
        tls, advertise = identity(config), _advertised(config.host)
        self.rpc = RpcServer(TableServerService(self.server), host=config.host, token=config.token,
                             tls=tls, advertise=advertise).start()
        self.metrics = serve_metrics(
            lambda: table_server_metrics(self.server.status(), self.server.latencies()), host=config.host,
            tls=tls, advertise=advertise,
        )
        self.server.metrics_url = self.metrics.url
        if isinstance(self.server.flusher, ProcessFlusher):
            self.server.flusher.start()  # its start-up runs now, not beside the first flush
        try:
            self.server.join(self.rpc.location)
        except RpcError:  # the master restarting too (its host gone): a heartbeat registers once it answers;
            log.warning("table server %s: master unreachable at start, registering by heartbeat", server_id,
                        exc_info=True)  # raising here would end the actor for good (Ray never restarts
            # an actor whose constructor raised)
        interval = config.heartbeat_interval.total_seconds()
        self._heartbeats = _Periodic("memtier-ts-heartbeat", interval, self._heartbeat)
        self._maintenance = _Periodic("memtier-ts-maintain", interval, self.server.maintain)
        freeze_startup()  # what startup made lives as long as the process: no full GC walks it
        watch_pauses(self.server.gc_pauses)

    def _heartbeat(self) -> None:
        flush_cpus = self.server.flusher.cpus if isinstance(self.server.flusher, ProcessFlusher) else None
        placement = {"cpus": describe(self.cpus), "flush_cpus": describe(flush_cpus) if flush_cpus else None}
        self.server.heartbeat(self.rpc.location, placement)

    def location(self) -> str:
        return self.rpc.location

    def pid(self) -> int:
        return os.getpid()

    def flush_worker_pid(self) -> int | None:
        """The process id of the flush worker this table server owns (None before its
        first flush, or when it flushes inline)."""
        return self.server.flusher.pid

    def node_id(self) -> str:
        """The Ray node this table server runs on."""
        return _import_ray().get_runtime_context().get_node_id()


class TableServiceShell:
    """A table-service actor: a :class:`ServiceWorker` taking compactions, clusterings
    and cleans from the master. Ray's CPU reservation is bookkeeping, not isolation: the
    process is pinned to ``cluster.service-cpus`` (away from the table servers), and runs
    only on CPU time no other process wants (``SCHED_IDLE``), so write acknowledgements,
    flushes and clients win any core they share with it; and it reads files gently
    (:func:`~memtier.io.read_gently`), so its reads do not hold up WAL syncs."""

    def __init__(self, worker_id: str, master_location: str, cluster: Mapping[str, str]) -> None:
        background()
        read_gently()
        config = load(ClusterConfig, cluster)
        _log_at(config.log_level)
        self.cpus = pin(service_cpus(config.service_cpus, available()))
        master = MasterProxy(master_location, token=config.token, tls_ca=config.tls_ca)
        self.worker = ServiceWorker(worker_id, master, cpus=describe(self.cpus))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memtier-services", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        started = False  # told the master, in the loop: raising in the constructor would end
        # the actor for good (Ray never restarts one whose constructor raised), and the
        # master may be restarting too (its host gone with this actor's)
        while not self._stop.is_set():
            try:
                if not started:
                    self.worker.start()
                    started = True
                if self.worker.run_once() is None:
                    self._stop.wait(_SERVICE_POLL_S)
            except Exception:  # the master restarting: try again shortly
                log.exception("table-service worker %s: taking a task failed", self.worker.worker_id)
                self._stop.wait(1.0)

    def completed(self) -> int:
        return self.worker.completed

    def pid(self) -> int:
        return os.getpid()


# == starting clusters ====================================================================


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host if host not in _WILDCARDS else "127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalCluster:
    """A running cluster: its master's address (and the token and CA to reach it), and
    handles on its actors."""

    path: str
    address: str
    token: str | None
    tls_ca: str | None
    master: Any
    table_servers: dict[str, Any] = field(default_factory=dict)
    owns_ray: bool = False
    table_services: dict[str, Any] = field(default_factory=dict)

    def client(self) -> Client:
        return connect(self.address, token=self.token, tls_ca=self.tls_ca)

    def pids(self) -> dict[str, int]:
        """Worker process ids of the master, every table server and every table-service
        actor (for crash tests)."""
        ray = _import_ray()
        pids = {MASTER_NAME: ray.get(self.master.pid.remote())}
        for name, actor in {**self.table_servers, **self.table_services}.items():
            pids[name] = ray.get(actor.pid.remote())
        return pids

    def flush_worker_pid(self, server: str) -> int | None:
        """Process id of table server ``server``'s flush worker (None before its first
        flush, or when it flushes inline)."""
        return _import_ray().get(self.table_servers[server].flush_worker_pid.remote())

    def shutdown(self) -> None:
        """Stop the actors (and the Ray runtime, if this cluster started it)."""
        ray = _import_ray()
        for actor in [*self.table_services.values(), *self.table_servers.values(), self.master]:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # already gone
                log.debug("actor already gone", exc_info=True)
        _CLUSTERS.pop(self.address, None)
        if self.owns_ray:
            ray.shutdown()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


_CLUSTERS: dict[str, LocalCluster] = {}


def start_local(
    path: str = "./memtier-data",
    *,
    table_servers: int = 2,
    config: Mapping[str, str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> LocalCluster:
    """Start an embedded Ray runtime and a cluster on it: tables and WALs under ``path``
    (local disk by default), with ``services.workers`` table-service actors (one by
    default). ``config`` takes the ``cluster.*``, ``tableserver.*``, ``wal.*``,
    ``services.*`` and ``catalog.*`` keys of :mod:`memtier.config`."""
    ray = _import_ray()
    owns = not ray.is_initialized()
    if owns:
        ray.init(namespace=NAMESPACE, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    cluster = start(path, table_servers=table_servers, config=config, storage_options=storage_options)
    cluster.owns_ray = owns
    return cluster


def start(
    path: str,
    *,
    table_servers: int = 2,
    address: str | None = None,
    config: Mapping[str, str] | None = None,
    storage_options: Mapping[str, str] | None = None,
    pin_to_nodes: bool = False,
    start_timeout: float = 120.0,
) -> LocalCluster:
    """Start a cluster on the Ray runtime this process is connected to (``address``:
    connect to that Ray cluster first). Table servers are spread over the Ray nodes;
    ``pin_to_nodes`` ties each to its node (one with CPUs: a node started with
    ``--num-cpus=0``, as a head node often is, gets none), so a lost node's buckets move to
    the surviving servers instead of the server restarting elsewhere, and places the
    master on this process's node (whose actors die with this process anyway)."""
    ray = _import_ray()
    if table_servers < 1:
        raise InvalidArgumentError(f"table_servers must be at least 1, got {table_servers}")
    if address is not None and not ray.is_initialized():
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, configure_logging=False)
    options = dict(config or {})
    cluster_options = {k: v for k, v in options.items() if k.startswith("cluster.")}
    server_options = {k: v for k, v in options.items() if k.startswith(("tableserver.", "wal."))}
    service_options = {k: v for k, v in options.items() if k.startswith("services.")}
    catalog_options = {k: v for k, v in options.items() if k.startswith("catalog.")}
    load(CatalogConfig, catalog_options)  # refused here, naming the key, not in the master actor
    cluster_config = load(ClusterConfig, cluster_options)
    services_config = load(ServicesConfig, service_options)
    _check_pool_fits(ray, services_config)
    if not path.startswith(("s3://", "hdfs://", "memory://")):
        path = os.path.abspath(path)
    port = _free_port(cluster_config.host)
    master_cls = ray.remote(MasterShell)
    master_options: dict[str, Any] = {}
    if pin_to_nodes:
        master_options["scheduling_strategy"] = _on_node(ray.get_runtime_context().get_node_id(), soft=False)
    master = master_cls.options(
        name=f"{MASTER_NAME}-{uuid.uuid4().hex[:8]}", namespace=NAMESPACE, max_restarts=-1,
        max_task_retries=-1, num_cpus=0, **master_options,
    ).remote(path, port, cluster_options, storage_options, service_options, catalog_options)
    address_of_master = ray.get(master.location.remote(), timeout=start_timeout)
    server_cls = ray.remote(TableServerShell)
    alive = [n for n in ray.nodes() if n.get("Alive")]
    nodes = [n["NodeID"] for n in alive if n.get("Resources", {}).get("CPU", 0) > 0] or [n["NodeID"] for n in alive]
    wal = wal_root(path, cluster_config)
    servers = {}
    for i in range(table_servers):
        name = f"ts-{i}"
        actor_options: dict[str, Any] = {"max_restarts": -1, "max_task_retries": -1, "num_cpus": 0,
                                         "runtime_env": {"env_vars": PROCESS_ENV}}
        if pin_to_nodes and nodes:
            actor_options["scheduling_strategy"] = _on_node(nodes[i % len(nodes)], soft=False)
        elif len(nodes) > 1:
            actor_options["scheduling_strategy"] = "SPREAD"
        servers[name] = server_cls.options(**actor_options).remote(
            name, address_of_master, wal, cluster_options, server_options, storage_options
        )
    ray.get([s.location.remote() for s in servers.values()], timeout=start_timeout)
    pool = _start_services(ray, address_of_master, cluster_options, services_config)
    ray.get([a.pid.remote() for a in pool.values()], timeout=start_timeout)
    cluster = LocalCluster(path, address_of_master, cluster_config.token, cluster_config.tls_ca, master, servers,
                           table_services=pool)
    _CLUSTERS[address_of_master] = cluster
    _wait_for_servers(cluster, table_servers, start_timeout)
    return cluster


def _advertised(host: str) -> str:
    """The address a process serving on ``host`` is reached at: for a wildcard (every
    interface), the address of the Ray node it runs on."""
    if host in _WILDCARDS:
        return _import_ray().util.get_node_ip_address()
    return host


def identity(config: ClusterConfig) -> ServerIdentity | None:
    """The certificate and key servers of this config serve TLS with, if it has them."""
    if config.tls_certificate is None or config.tls_key is None:
        return None
    return ServerIdentity(config.tls_certificate, config.tls_key)


def wal_root(path: str, config: ClusterConfig) -> str:
    """Where the table servers of a cluster whose tables and state live under ``path``
    keep their WALs: ``cluster.wal-path``, else ``<path>/_memtier/wal``."""
    if config.wal_path is None:
        return join(path, "_memtier", "wal")
    return config.wal_path if "://" in config.wal_path else os.path.abspath(config.wal_path)


def _on_node(node_id: str, *, soft: bool) -> Any:
    """A scheduling strategy placing an actor on Ray node ``node_id`` (elsewhere if that
    one cannot take it, with ``soft``)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id, soft=soft)


def _check_pool_fits(ray: Any, config: ServicesConfig) -> None:
    """Fail before starting anything when Ray has too few free CPUs for the table-service
    pool (its actors would wait for them forever)."""
    needed = config.workers * config.cpus
    free = ray.available_resources().get("CPU", 0.0)
    if needed > free:
        raise InvalidArgumentError(
            f"the table-service pool needs {needed:g} CPUs (services.workers={config.workers} x "
            f"services.cpus={config.cpus:g}) but this Ray cluster has {free:g} free; lower "
            "services.cpus, set services.workers=0, or give Ray more CPUs"
        )


def _start_services(
    ray: Any, master: str, cluster_options: Mapping[str, str], config: ServicesConfig
) -> dict[str, Any]:
    """The table-service pool: ``services.workers`` actors, each reserving ``services.cpus``."""
    actor_cls = ray.remote(TableServiceShell)
    return {
        f"svc-{i}": actor_cls.options(max_restarts=-1, max_task_retries=-1, num_cpus=config.cpus).remote(
            f"svc-{i}", master, cluster_options
        )
        for i in range(config.workers)
    }


def _wait_for_servers(cluster: LocalCluster, count: int, timeout: float) -> None:
    proxy = MasterProxy(cluster.address, token=cluster.token, tls_ca=cluster.tls_ca)
    deadline = time.monotonic() + timeout
    while len(proxy.servers()) < count:
        if time.monotonic() > deadline:
            raise RpcError(f"only {len(proxy.servers())} of {count} table servers registered")
        time.sleep(0.05)


def running_cluster() -> LocalCluster | None:
    """The cluster this process started last (and has not shut down), if any."""
    return list(_CLUSTERS.values())[-1] if _CLUSTERS else None


def connect(address: str | None = None, *, token: str | None = None, tls_ca: str | None = None) -> Client:
    """A client of the cluster at ``address`` (``grpc://host:port``, ``grpc+tls://`` with
    TLS). Without one: the cluster ``start_local`` started in this process, else
    ``cluster.address`` from the environment (``MEMTIER_CLUSTER_ADDRESS``). ``tls_ca``, the
    CA (a PEM file or text) a TLS cluster's certificates are checked against, defaults to
    that cluster's, else ``cluster.tls.ca`` (``MEMTIER_CLUSTER_TLS_CA``), else the system's."""
    configured = load(ClusterConfig)
    if address is None:
        running = running_cluster()
        if running is not None:
            address, token, tls_ca = running.address, token or running.token, tls_ca or running.tls_ca
        else:
            address, token = configured.address, token or configured.token
    tls_ca = tls_ca or configured.tls_ca
    if address is None:
        raise InvalidArgumentError(
            "no memtier cluster to connect to: call memtier.start_local(path) first, pass "
            "address='grpc://host:port', or set MEMTIER_CLUSTER_ADDRESS"
        )
    return Client(
        MasterProxy(address, token=token, tls_ca=tls_ca),
        lambda _server_id, location: TableServerProxy(location, token=token, tls_ca=tls_ca),
    )

