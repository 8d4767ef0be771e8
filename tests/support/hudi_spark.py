"""Apache Hudi on Spark, for real: Hudi's Spark bundle in a SparkSession of its own process.

``scripts/jvm/hudi_spark_setup.sh`` makes the PySpark 3.5 venv and fetches the bundle of a
Hudi version (a no-op once done; bundles of several versions sit side by side);
:class:`HudiSpark` starts ``scripts/jvm/hudi_spark_worker.py`` there and talks to it,
passing rows as Parquet files. Tests take the module-scoped ``hudi_spark`` fixture (Hudi
1.0.2: one SparkSession per test module, stopped at its end) or ``HudiSpark(version=...)``.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "jvm" / "hudi_spark_setup.sh"
WORKER = ROOT / "scripts" / "jvm" / "hudi_spark_worker.py"
READ_MODES = ("snapshot", "read_optimized", "incremental")
#: The Hudi releases the tests run (Maven Central serves their Spark 3.5 bundles), and the
#: table version each writes by default.
HUDI_VERSIONS = {"1.0.2": 8, "1.1.1": 9, "1.2.0": 9}
DEFAULT_VERSION = "1.0.2"
#: Writer options that keep Hudi's log files: no compaction inline or scheduled (a Spark
#: datasource write to a merge-on-read table compacts inline every 5 deltacommits).
KEEP_LOGS = {"hoodie.compact.inline": "false", "hoodie.compact.schedule.inline": "false",
             "hoodie.datasource.compaction.async.enable": "false"}


def setup(version: str = DEFAULT_VERSION) -> dict[str, str]:
    """Run the setup script for Hudi ``version`` (idempotent); the venv python, bundle jar
    and versions."""
    if version not in HUDI_VERSIONS:
        raise ValueError(f"Hudi version {version!r} is not one the tests run: {sorted(HUDI_VERSIONS)}")
    run = subprocess.run(["bash", str(SETUP), version], check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def writer_options(
    name: str,
    record_key: str | Sequence[str],
    ordering_field: str,
    partition_fields: str | Sequence[str] = (),
    *,
    table_type: str = "MERGE_ON_READ",
    buckets: int | None = None,
    table_version: int | None = None,
    operation: str = "upsert",
    log_block_format: str | None = None,
    **extra: str,
) -> dict[str, str]:
    """Hudi Spark datasource write options for a table laid out as memtier lays its own:
    hive-style partitions, the bucket index when ``buckets`` is given (else Hudi's default
    index), ``table_version`` 6, 8 or 9 (default: the bundle's own, :data:`HUDI_VERSIONS`)."""
    keys = [record_key] if isinstance(record_key, str) else list(record_key)
    partitions = [partition_fields] if isinstance(partition_fields, str) else list(partition_fields)
    options = {
        "hoodie.table.name": name,
        "hoodie.datasource.write.table.type": table_type,
        "hoodie.datasource.write.operation": operation,
        "hoodie.datasource.write.recordkey.field": ",".join(keys),
        "hoodie.datasource.write.precombine.field": ordering_field,
        "hoodie.datasource.write.partitionpath.field": ",".join(partitions),
        "hoodie.datasource.write.hive_style_partitioning": "true",
    }
    if len(keys) > 1 or len(partitions) > 1:
        options["hoodie.datasource.write.keygenerator.class"] = "org.apache.hudi.keygen.ComplexKeyGenerator"
    elif not partitions:
        options["hoodie.datasource.write.keygenerator.class"] = "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
    if buckets is not None:
        options["hoodie.index.type"] = "BUCKET"
        options["hoodie.bucket.index.num.buckets"] = str(buckets)
    if table_version is not None:
        options["hoodie.write.table.version"] = str(table_version)
    if log_block_format is not None:
        options["hoodie.logfile.data.block.format"] = log_block_format
    return {**options, **extra}


def read_options(
    mode: str = "snapshot", *, start: str | None = None, end: str | None = None, as_of: str | None = None
) -> dict[str, str]:
    """Hudi Spark datasource read options for memtier's read modes."""
    if mode not in READ_MODES:
        raise ValueError(f"mode must be one of {READ_MODES}, got {mode!r}")
    options = {"hoodie.datasource.query.type": mode}
    if mode == "incremental":
        if start is None:
            raise ValueError("an incremental read needs start")
        options["hoodie.datasource.read.begin.instanttime"] = start
        if end is not None:
            options["hoodie.datasource.read.end.instanttime"] = end
    if as_of is not None:
        options["as.of.instant"] = as_of
    return options


class HudiSparkError(RuntimeError):
    """A request the Spark worker answered with an error (its traceback in the message)."""


class HudiSpark:
    """One Spark worker process with the bundle of Hudi ``version`` (and the Spark settings
    ``conf``); ``close`` stops it."""

    def __init__(self, workdir: str | Path | None = None, conf: Mapping[str, str] | None = None,
                 version: str = DEFAULT_VERSION) -> None:
        env = setup(version)
        self.versions = {"hudi": env["hudi"], "spark": env["spark"]}
        self._tmp = tempfile.TemporaryDirectory(prefix="memtier-hudi-spark-", dir=workdir)
        self.workdir = Path(self._tmp.name)
        self.log_path = self.workdir / "spark.log"
        self._log = self.log_path.open("w")
        self._proc = subprocess.Popen(
            [env["python"], str(WORKER), env["jar"], *(f"{k}={v}" for k, v in (conf or {}).items())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1,
            cwd=self.workdir,
        )
        self._answer()  # ready

    def _answer(self) -> dict[str, Any]:
        line = self._proc.stdout.readline() if self._proc.stdout else ""
        if not line:
            raise HudiSparkError(f"the Spark worker exited ({self._proc.poll()}); log tail:\n{self.log_tail()}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise HudiSparkError(answer["error"])
        return answer

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and wait for its answer."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self._proc.stdin.flush()
        return self._answer()

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _scratch(self, suffix: str = "") -> str:
        return str(self.workdir / f"{uuid.uuid4().hex}{suffix}")

    # -- rows -------------------------------------------------------------------------
    def read(self, path: str, mode: str = "snapshot", **options: Any) -> pa.Table:
        """``spark.read.format("hudi")`` of ``path`` in a memtier read mode (``start``,
        ``end`` for incremental, ``as_of`` for time travel), Hudi's meta columns included."""
        return self.read_with(path, read_options(mode, **options))

    def read_with(self, path: str, options: Mapping[str, str]) -> pa.Table:
        """A Hudi read with raw datasource options."""
        out = self._scratch()
        self.request("read", path=path, options=dict(options), out=out)
        return pq.read_table(out)

    def write(self, path: str, data: pa.Table, options: Mapping[str, str], mode: str = "append") -> float:
        """``df.write.format("hudi").options(...).mode(mode).save(path)`` of ``data``; the
        seconds the write call took."""
        source = self._scratch(".parquet")
        pq.write_table(data, source)
        return self.request("write", path=path, options=dict(options), mode=mode, input=source)["seconds"]

    def sql(self, query: str) -> list[list[str]]:
        return self.request("sql", query=query)["rows"]

    def close(self) -> None:
        """Stop Spark and the worker (killed if it does not exit in time)."""
        if self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
                self._proc.stdin.close()
                self._proc.wait(timeout=30)
            except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
                self._proc.kill()
                self._proc.wait()
        self._log.close()
        self._tmp.cleanup()

    def __enter__(self) -> HudiSpark:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def listed_files(path: str) -> set[tuple[str, str, int]]:
    """(partition path, file name, size) of every data file of the (local) table at ``path``."""
    root = Path(path)
    found = set()
    for file in root.rglob("*"):
        relative = file.relative_to(root)
        if (file.is_file() and relative.parts[0] != ".hoodie" and not file.name.endswith(".crc")
                and file.name != ".hoodie_partition_metadata"):
            partition = str(relative.parent)
            found.add(("" if partition == "." else partition, file.name, file.stat().st_size))
    return found


def assert_metadata_table_current(spark: HudiSpark, path: str) -> None:
    """Hudi's view of the table's metadata table (its ``files`` partition, read as Hudi's
    readers read it: ``CALL validate_metadata_table_files``) lists exactly the files, with
    their sizes, that the file system lists."""
    name = "mdt_" + uuid.uuid5(uuid.NAMESPACE_URL, path).hex
    spark.sql(f"CREATE TABLE IF NOT EXISTS {name} USING hudi LOCATION '{path}'")
    rows = spark.sql(f"CALL validate_metadata_table_files(table => '{name}', verbose => true)")
    in_metadata = {(r[0], r[1], int(r[5])) for r in rows if r[3].lower() == "true"}
    assert in_metadata == listed_files(path), rows
    assert spark.sql(f"CALL validate_metadata_table_files(table => '{name}')") == []


@pytest.fixture(scope="module")
def hudi_spark() -> Iterator[HudiSpark]:
    """Apache Hudi on Spark for one test module."""
    spark = HudiSpark()
    try:
        yield spark
    finally:
        spark.close()
