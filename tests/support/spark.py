"""A real local SparkSession for tests: two cores, on loopback, Python workers from this
venv (environment.md §2)."""

from __future__ import annotations

import os
import sys
from typing import Any


def local_session(app: str = "memtier-tests") -> Any:
    """A ``local[2]`` SparkSession (the one this process already has, if any)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]").appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.task.maxFailures", "1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
