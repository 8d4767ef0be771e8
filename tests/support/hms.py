"""A real Hive Metastore for tests: Apache Hive's standalone metastore server (3.1.3 or
4.0.1), on embedded Derby in a temporary directory.

``scripts/jvm/fetch_hms.sh`` (run by ``scripts/test.sh``) puts both servers and their
dependencies from Maven Central under ``.cache/hms/``. :func:`run_hms` starts it on
loopback and a free port with a small heap (the machine is shared), waits until it answers
a Thrift call, and at the end stops it by its PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

from memtier.catalog.hivemetastore import HiveMetastore
from memtier.errors import MetastoreError
from tests.support import servers

REPO = Path(__file__).resolve().parents[2]
#: The versions scripts/jvm/fetch_hms.sh fetches: the last Hive 3 release, and Hive 4.
VERSIONS = ("3.1.3", "4.0.1")
START_DEADLINE_S = 180.0
FETCH_HINT = "run scripts/jvm/fetch_hms.sh (scripts/test.sh does)"


@dataclass
class HiveMetastoreServer:
    """A running Hive Metastore on ``127.0.0.1:port``."""

    version: str
    port: int
    pid: int
    workdir: Path

    @property
    def uri(self) -> str:
        return f"thrift://127.0.0.1:{self.port}"

    def handle(self) -> HiveMetastore:
        return HiveMetastore(self.uri)


def _site(settings: dict[str, str]) -> str:
    properties = "".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
                         for k, v in settings.items())
    return f"<configuration>\n{properties}</configuration>\n"


def _log_tail(workdir: Path) -> str:
    with contextlib.suppress(OSError):
        return (workdir / "stdout.log").read_text(errors="replace")[-3000:]
    return "(no log)"


@contextlib.contextmanager
def run_hms(version: str = VERSIONS[-1], *, port: int | None = None,
            heap: str = "256M") -> Iterator[HiveMetastoreServer]:
    """Run the cached metastore ``version`` (on a Java 17: ``MEMTIER_HMS_JAVA`` or ``java``
    on PATH) until the context exits, on ``port`` (default: a free one); its database
    starts empty (only ``default``)."""
    java = os.environ.get("MEMTIER_HMS_JAVA") or shutil.which("java")
    home = REPO / ".cache" / "hms" / f"hive-metastore-{version}"
    if not (home / ".complete").exists() or java is None:
        raise RuntimeError(f"the Hive Metastore {version} or a Java is missing: {FETCH_HINT}")
    workdir = Path(tempfile.mkdtemp(prefix="memtier-hms-"))
    port = port or servers.free_port()
    (workdir / "conf").mkdir()
    (workdir / "conf" / "metastore-site.xml").write_text(_site({
        "metastore.thrift.bind.host": "127.0.0.1",
        "metastore.thrift.port": str(port),
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={workdir / 'derby'};create=true",
        "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        # the schema is created on first use instead of by Hive's schematool (a fresh database)
        "metastore.schema.verification": "false",
        "datanucleus.schema.autoCreateAll": "true",
        "metastore.warehouse.dir": str(workdir / "warehouse"),
        # Hive 3's defaults need classes of Hive's query compiler (hive-exec), which a metastore
        # alone lacks: a plain partition-expression proxy, and only the event-cleaning task
        "metastore.expression.proxy": "org.apache.hadoop.hive.metastore.DefaultPartitionExpressionProxy",
        "metastore.task.threads.always": "org.apache.hadoop.hive.metastore.events.EventCleanerTask",
    }))
    args = [java, f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dderby.system.home={workdir}", "-cp", f"{workdir / 'conf'}:{home / 'lib'}/*",
            "org.apache.hadoop.hive.metastore.HiveMetaStore"]
    process = servers.start(args, workdir)
    server = HiveMetastoreServer(version, port, process.pid, workdir)
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the Hive Metastore exited with {process.returncode}:\n{_log_tail(workdir)}")
            try:
                server.handle().partition_names("default", "none")  # a real call: the schema is up
                break
            except MetastoreError as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the Hive Metastore is not ready after {START_DEADLINE_S:.0f}s ({e}):\n"
                                       f"{_log_tail(workdir)}") from e
            time.sleep(0.5)  # polling interval while the JVM starts
        yield server
    finally:
        servers.stop(process)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def hms() -> Iterator[HiveMetastoreServer]:
    """A Hive Metastore 3.1.3 the interop suites share, each in databases of its own."""
    with run_hms("3.1.3") as server:
        yield server
