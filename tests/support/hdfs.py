"""A real HDFS for tests: Apache Hadoop's own NameNode and DataNodes, each its own JVM.

``scripts/jvm/fetch_hadoop.sh`` (run by ``scripts/setup.sh``) puts the ``hadoop-hdfs``
server jar and its dependencies from Maven Central under ``.cache/hadoop/``.
:func:`run_hdfs` formats a fresh NameNode in a temporary directory, starts it and three
DataNodes (replication 3) on loopback and free ports, each a separate ``java`` process a
test may kill by PID (:meth:`HdfsCluster.kill_datanode`, :meth:`HdfsCluster.stop_namenode`)
and start again on the same ports and storage, waits (with deadlines) until the NameNode
is out of safe mode with every DataNode live, and at the end stops every daemon by its
PID. The fixture ``hdfs`` shares one such cluster per test session; tests that kill
daemons start their own. ``python -m tests.support.hdfs`` (``scripts/hdfs.sh``) runs one
for a person and prints its ``hdfs://`` URI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

from tests.support import servers

REPO = Path(__file__).resolve().parents[2]
VERSION = "3.4.1"  # what scripts/jvm/fetch_hadoop.sh fetches by default
FETCH_HINT = "run scripts/jvm/fetch_hadoop.sh (scripts/setup.sh does)"
START_DEADLINE_S = 120.0
#: Seconds between DataNode heartbeats, and after which the NameNode checks for dead ones:
#: a killed DataNode is declared dead after 2 x recheck + 10 x heartbeat = 14 s.
HEARTBEAT_S = 1
RECHECK_MS = 2000

#: The block size of the shared cluster's files: small, so that tests' files span blocks.
TEST_BLOCK_SIZE = 4 << 20


def _site(settings: dict[str, str]) -> str:
    properties = "".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
                         for k, v in settings.items())
    return f"<configuration>\n{properties}</configuration>\n"


_LOG4J = """\
log4j.rootLogger=INFO,console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{HH:mm:ss,SSS} %p %c{1}: %m%n
log4j.logger.org.apache.hadoop.hdfs.StateChange=WARN
log4j.logger.org.apache.hadoop.hdfs.server.datanode.DataNode.clienttrace=WARN
log4j.logger.org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit=WARN
"""


#: What Hadoop 3.4 needs of Java 17's modules (WebHDFS's JAXB reflects into java.lang).
_OPENS = [f"--add-opens=java.base/{package}=ALL-UNNAMED"
          for package in ("java.lang", "java.lang.reflect", "java.util", "java.nio", "sun.nio.ch")]


@dataclass
class Daemon:
    """One HDFS daemon: its configuration directory and, while it runs, its process."""

    name: str  # "namenode", "datanode-0", ...
    main_class: str
    workdir: Path
    heap: str
    process: subprocess.Popen[bytes] | None = None
    #: A DataNode's data-transfer port (what a write pipeline connects to); None for the NameNode.
    transfer_port: int | None = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def args(self, java: str, lib: Path, *extra: str) -> list[str]:
        return [java, f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *_OPENS,
                "-Dhadoop.log.dir=" + str(self.workdir), "-cp", f"{self.workdir / 'conf'}:{lib.parent / 'web'}:{lib}/*",
                self.main_class, *extra]

    def serving(self) -> bool:
        """Whether the daemon accepts connections on its data-transfer port (a DataNode
        the NameNode still counts live from before a restart may not yet)."""
        if self.transfer_port is None:
            return True
        with socket.socket() as probe:
            probe.settimeout(1)
            return probe.connect_ex(("127.0.0.1", self.transfer_port)) == 0

    def log_tail(self, chars: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return (self.workdir / "stdout.log").read_text(errors="replace")[-chars:]
        return "(no log)"


@dataclass
class HdfsCluster:
    """A NameNode and DataNodes on 127.0.0.1 under ``workdir``; see the module docstring."""

    workdir: Path
    java: str
    lib: Path
    rpc_port: int
    http_port: int
    namenode: Daemon
    datanodes: list[Daemon] = field(default_factory=list)

    @property
    def uri(self) -> str:
        """``hdfs://127.0.0.1:<port>``: the filesystem's root."""
        return f"hdfs://127.0.0.1:{self.rpc_port}"

    def url(self, *parts: str) -> str:
        """``hdfs://127.0.0.1:<port>/<parts...>``."""
        return "/".join([self.uri, *(p.strip("/") for p in parts if p)])

    @property
    def storage_options(self) -> dict[str, str]:
        """What memtier's HdfsFileIO needs to know of this cluster: where WebHDFS is."""
        return {"dfs.namenode.http-address": f"127.0.0.1:{self.http_port}"}

    # -- daemons ---------------------------------------------------------------------------
    def _start(self, daemon: Daemon) -> None:
        if daemon.running:
            raise RuntimeError(f"{daemon.name} is already running (pid {daemon.pid})")
        daemon.process = servers.start(daemon.args(self.java, self.lib), daemon.workdir)

    def start_namenode(self) -> None:
        """Start the NameNode (again) on its port, over its metadata."""
        self._start(self.namenode)

    def stop_namenode(self) -> None:
        """SIGKILL the NameNode (its edit log is synced on every change: nothing is lost)."""
        self._kill(self.namenode)

    def start_datanode(self, index: int) -> None:
        """Start DataNode ``index`` (again) on its ports and storage."""
        self._start(self.datanodes[index])

    def kill_datanode(self, index: int) -> int:
        """SIGKILL DataNode ``index``; its PID."""
        pid = self.datanodes[index].pid
        self._kill(self.datanodes[index])
        assert pid is not None
        return pid

    def _kill(self, daemon: Daemon) -> None:
        if daemon.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(daemon.process.pid, signal.SIGKILL)
        daemon.process.wait()
        daemon.process = None

    def stop(self) -> None:
        """Stop every daemon by its PID (SIGTERM, then SIGKILL)."""
        for daemon in [*self.datanodes, self.namenode]:
            if daemon.process is not None:
                servers.stop(daemon.process)
                daemon.process = None

    # -- state -----------------------------------------------------------------------------
    def _jmx(self, bean: str) -> dict[str, object]:
        url = f"http://127.0.0.1:{self.http_port}/jmx?qry={bean}"
        with urllib.request.urlopen(url, timeout=5) as response:
            beans = json.load(response)["beans"]
        return beans[0] if beans else {}

    def live_datanodes(self) -> int:
        """DataNodes the NameNode counts live now."""
        return int(self._jmx("Hadoop:service=NameNode,name=FSNamesystemState").get("NumLiveDataNodes", 0))

    def in_safe_mode(self) -> bool:
        return bool(self._jmx("Hadoop:service=NameNode,name=NameNodeInfo").get("Safemode"))

    def wait_ready(self, datanodes: int | None = None, timeout: float = START_DEADLINE_S) -> None:
        """Wait until the NameNode is out of safe mode with ``datanodes`` (default: every
        running one) live and every running DataNode accepts pipeline connections (the
        NameNode keeps counting a killed one live for a while, so a count alone does not
        say a restarted one is up); a daemon that exits meanwhile fails at once, with its log."""
        want = sum(d.running for d in self.datanodes) if datanodes is None else datanodes
        deadline = time.monotonic() + timeout
        state = "the NameNode's HTTP server is not up"
        while True:
            for daemon in [self.namenode, *self.datanodes]:
                if daemon.process is not None and daemon.process.poll() is not None:
                    raise RuntimeError(f"HDFS {daemon.name} exited with {daemon.process.returncode}:\n"
                                       f"{daemon.log_tail()}")
            with contextlib.suppress(OSError, ValueError):
                live, safe = self.live_datanodes(), self.in_safe_mode()
                starting = [d.name for d in self.datanodes if d.running and not d.serving()]
                if live >= want and not safe and not starting:
                    return
                state = (f"{live} of {want} DataNodes live, safe mode {'on' if safe else 'off'}"
                         f"{', not serving yet: ' + ', '.join(starting) if starting else ''}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"HDFS is not ready after {timeout:.0f}s ({state}):\n"
                                   f"{self.namenode.log_tail()}")
            time.sleep(0.2)  # polling interval while the JVMs start


def _find_java() -> str:
    java = os.environ.get("MEMTIER_HADOOP_JAVA") or shutil.which("java")
    if java is None:
        raise RuntimeError("no java on PATH for HDFS: scripts/setup.sh installs Java 17")
    return java


def _configure(cluster: HdfsCluster, daemon: Daemon, block_size: int, settings: dict[str, str]) -> None:
    conf = daemon.workdir / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "core-site.xml").write_text(_site({
        "fs.defaultFS": cluster.uri,
        "hadoop.tmp.dir": str(daemon.workdir / "tmp"),
    }))
    (conf / "hdfs-site.xml").write_text(_site({
        "dfs.namenode.rpc-address": f"127.0.0.1:{cluster.rpc_port}",
        "dfs.namenode.http-address": f"127.0.0.1:{cluster.http_port}",
        "dfs.replication": "3",
        "dfs.blocksize": str(block_size),
        "dfs.permissions.enabled": "false",
        "dfs.heartbeat.interval": str(HEARTBEAT_S),
        "dfs.namenode.heartbeat.recheck-interval": str(RECHECK_MS),
        "dfs.namenode.safemode.extension": "0",
        "dfs.namenode.datanode.registration.ip-hostname-check": "false",
        "dfs.namenode.handler.count": "8",
        "dfs.datanode.handler.count": "3",
        **settings,
    }))
    (conf / "log4j.properties").write_text(_LOG4J)


@contextlib.contextmanager
def run_hdfs(datanodes: int = 3, *, version: str = VERSION, workdir: Path | None = None,
             block_size: int = 128 << 20, heap: str = "256m", datanode_heap: str = "160m",
             rpc_port: int | None = None, http_port: int | None = None) -> Iterator[HdfsCluster]:
    """Format and run an HDFS until the context exits (see the module docstring); its
    data lives in ``workdir`` (default: a new temporary directory, removed after), files
    in blocks of ``block_size`` bytes (at least 1 MiB), the NameNode on ``rpc_port`` and
    ``http_port`` (default: free ports)."""
    lib = REPO / ".cache" / "hadoop" / f"hadoop-{version}" / "lib"
    if not (lib.parent / ".complete").exists():
        raise RuntimeError(f"Hadoop {version} is missing: {FETCH_HINT}")
    owned = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="memtier-hdfs-")) if workdir is None else workdir
    nn = Daemon("namenode", "org.apache.hadoop.hdfs.server.namenode.NameNode", workdir / "namenode", heap)
    cluster = HdfsCluster(workdir, _find_java(), lib, rpc_port or servers.free_port(),
                          http_port or servers.free_port(), nn)
    _configure(cluster, nn, block_size, {"dfs.namenode.name.dir": f"file://{nn.workdir / 'name'}"})
    for i in range(datanodes):
        dn = Daemon(f"datanode-{i}", "org.apache.hadoop.hdfs.server.datanode.DataNode",
                    workdir / f"datanode-{i}", datanode_heap, transfer_port=servers.free_port())
        _configure(cluster, dn, block_size, {
            "dfs.datanode.data.dir": f"file://{dn.workdir / 'data'}",
            "dfs.datanode.address": f"127.0.0.1:{dn.transfer_port}",
            "dfs.datanode.http.address": f"127.0.0.1:{servers.free_port()}",
            "dfs.datanode.ipc.address": f"127.0.0.1:{servers.free_port()}",
        })
        cluster.datanodes.append(dn)
    try:
        formatted = subprocess.run(nn.args(cluster.java, lib, "-format", "-force", "-nonInteractive"),
                                   cwd=nn.workdir, capture_output=True, timeout=START_DEADLINE_S)
        if formatted.returncode != 0:
            raise RuntimeError(f"formatting the NameNode failed:\n{formatted.stdout.decode()[-3000:]}"
                               f"{formatted.stderr.decode()[-3000:]}")
        cluster.start_namenode()
        for i in range(datanodes):
            cluster.start_datanode(i)
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()
        if owned:
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def hdfs() -> Iterator[HdfsCluster]:
    """One HDFS (a NameNode, three DataNodes) shared by the session's tests; tests that
    stop daemons start their own with :func:`run_hdfs`."""
    try:
        with run_hdfs(block_size=TEST_BLOCK_SIZE) as cluster:
            yield cluster
    except RuntimeError as e:
        if "missing" in str(e):
            pytest.skip(str(e))
        raise


def main() -> None:
    """Run an HDFS until Ctrl-C, printing its URI (``scripts/hdfs.sh``)."""
    parser = argparse.ArgumentParser(description="Run a NameNode and DataNodes on 127.0.0.1.")
    parser.add_argument("--datanodes", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="keep the data here (default: a temporary directory)")
    parser.add_argument("--port", type=int, default=8020, help="the NameNode's RPC port (default: %(default)s)")
    parser.add_argument("--http-port", type=int, default=9870,
                        help="its HTTP port, WebHDFS's (default: %(default)s, where memtier looks by default)")
    args = parser.parse_args()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"starting an HDFS NameNode and {args.datanodes} DataNodes (Hadoop {VERSION}) ...", flush=True)
    with run_hdfs(args.datanodes, workdir=args.dir, rpc_port=args.port, http_port=args.http_port) as cluster:
        print(f"HDFS is up after {time.monotonic() - started:.1f} s: {cluster.uri}")
        print(f"  NameNode pid {cluster.namenode.pid}, web UI http://127.0.0.1:{cluster.http_port}/")
        for dn in cluster.datanodes:
            print(f"  {dn.name} pid {dn.pid}")
        print(f"  data and logs: {cluster.workdir}")
        print(f"  try: memtier start --path {cluster.url('memtier')}")
        if args.http_port != 9870:
            print(f"       with the storage option dfs.namenode.http-address=127.0.0.1:{args.http_port}")
        print("Ctrl-C stops it.", flush=True)
        stop = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        signal.sigwait(stop)
        print("stopping HDFS ...", flush=True)


if __name__ == "__main__":
    main()
