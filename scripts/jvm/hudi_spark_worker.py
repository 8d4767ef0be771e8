"""One SparkSession with Apache Hudi's Spark bundle, driven over stdin/stdout.

Runs in the PySpark 3.5 venv that ``scripts/jvm/hudi_spark_setup.sh`` makes (it imports
nothing of memtier's), started by ``tests/support/hudi_spark.py``:

    .cache/hudi-spark/venv/bin/python scripts/jvm/hudi_spark_worker.py BUNDLE_JAR [KEY=VALUE ...]

(``KEY=VALUE``: more Spark settings, e.g. a Hive Metastore as Spark SQL's catalog.)

Each stdin line is a JSON request, each stdout line its JSON answer: ``{"ok": true, ...}``
or ``{"ok": false, "error": "..."}``. Rows travel as Parquet files (Spark writes them, the
caller reads them with pyarrow, and the other way round). Requests:

- ``{"op": "read", "path", "options", "out"}``: ``spark.read.format("hudi")`` with the
  options, written as Parquet to the folder ``out``.
- ``{"op": "load", "name", "input"}``: a Parquet file cached in Spark's memory as ``name``.
- ``{"op": "write", "path", "options", "mode", "input" | "name"}``: ``df.write.format("hudi")``
  of a Parquet file or a loaded frame; answers ``seconds`` (the write call) and ``returned``
  (``time.monotonic()`` when it returned).
- ``{"op": "count", "path", "options", "where"}``: rows of a fresh Hudi read matching a SQL
  condition; answers ``rows`` and ``returned``.
- ``{"op": "scan", "path", "options"}``: a Hudi read of every row and column into Spark's
  no-op sink; answers ``seconds`` (that scan) and ``rows`` (counted after, untimed).
- ``{"op": "sql", "query"}``: Spark SQL (e.g. Hudi's ``CALL`` procedures); answers ``rows``
  as lists of strings and ``seconds`` (the query, collected).
- ``{"op": "stop"}``: stops Spark and exits.

Spark and its JVM write their logs to stderr; stdout carries answers only.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from typing import Any


def session(jar: str, conf: dict[str, str]) -> Any:
    """A local SparkSession with Hudi's bundle, extension and catalog, on loopback, and
    the settings ``conf``."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("memtier-hudi-spark")
        .config("spark.jars", jar)
        .config("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        .config("spark.kryo.registrator", "org.apache.spark.HoodieSparkKryoRegistrar")
        .config("spark.sql.extensions", "org.apache.spark.sql.hudi.HoodieSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.hudi.catalog.HoodieCatalog")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "1g")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


OPS = ("read", "load", "write", "count", "scan", "sql")


class Worker:
    """Answers requests against one SparkSession."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.frames: dict[str, Any] = {}

    def _hudi(self, request: dict[str, Any]) -> Any:
        return self.spark.read.format("hudi").options(**request.get("options", {})).load(request["path"])

    def read(self, request: dict[str, Any]) -> dict[str, Any]:
        frame = self._hudi(request)
        frame.coalesce(1).write.mode("overwrite").parquet(request["out"])
        return {}

    def load(self, request: dict[str, Any]) -> dict[str, Any]:
        frame = self.spark.read.parquet(request["input"]).cache()
        self.frames[request["name"]] = frame
        return {"rows": frame.count()}

    def write(self, request: dict[str, Any]) -> dict[str, Any]:
        if "name" in request:
            frame = self.frames[request["name"]]
        else:
            frame = self.spark.read.parquet(request["input"])
        started = time.monotonic()
        (frame.write.format("hudi").options(**request.get("options", {}))
         .mode(request.get("mode", "append")).save(request["path"]))
        returned = time.monotonic()
        return {"seconds": returned - started, "returned": returned}

    def count(self, request: dict[str, Any]) -> dict[str, Any]:
        rows = self._hudi(request).where(request["where"]).count()
        return {"rows": rows, "returned": time.monotonic()}

    def scan(self, request: dict[str, Any]) -> dict[str, Any]:
        frame = self._hudi(request)
        started = time.monotonic()
        frame.write.format("noop").mode("overwrite").save()
        return {"seconds": time.monotonic() - started, "rows": frame.count()}

    def sql(self, request: dict[str, Any]) -> dict[str, Any]:
        started = time.monotonic()
        rows = self.spark.sql(request["query"]).collect()
        return {"rows": [[str(v) for v in row] for row in rows], "seconds": time.monotonic() - started}


def main() -> None:
    jar = sys.argv[1]
    conf = dict(arg.split("=", 1) for arg in sys.argv[2:])
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the JVM inherits fd 1: its output goes to stderr with the logs
    sys.stdout = sys.stderr
    worker = Worker(session(jar, conf))
    answers.write(json.dumps({"ok": True, "ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        if op == "stop":
            break
        try:
            if op not in OPS:
                raise ValueError(f"unknown request {op!r}; known: {sorted(OPS)} and 'stop'")
            answer = {"ok": True, **getattr(worker, op)(request)}
        except Exception:  # noqa: BLE001 - every failure goes back to the caller
            answer = {"ok": False, "error": traceback.format_exc()}
        answers.write(json.dumps(answer) + "\n")
    worker.spark.stop()


if __name__ == "__main__":
    main()
