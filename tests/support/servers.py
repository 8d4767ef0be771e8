"""What the harnesses of server processes a test starts share: a free loopback port, the
start (logging to a file, in a session of its own) and the stop by PID."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path

STOP_GRACE_S = 15.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def coordinator_properties(port: int, *extra: str) -> str:
    """``etc/config.properties`` of a Trino or Presto coordinator that is its own worker, on
    loopback ``port``, with small memory limits (the machine is shared); ``extra`` lines
    appended."""
    return "\n".join([
        "coordinator=true",
        "node-scheduler.include-coordinator=true",
        f"http-server.http.port={port}",
        f"discovery.uri=http://127.0.0.1:{port}",
        "query.max-memory=256MB",
        "query.max-memory-per-node=256MB",
        "memory.heap-headroom-per-node=128MB",
        *extra,
        "",
    ])


def start(args: Sequence[str], workdir: Path) -> subprocess.Popen[bytes]:
    """Start ``args`` in ``workdir``, its output into ``workdir/stdout.log``."""
    with open(workdir / "stdout.log", "wb") as out:
        return subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT, cwd=workdir,
                                start_new_session=True)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not exited within STOP_GRACE_S."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
