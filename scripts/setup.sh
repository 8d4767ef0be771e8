#!/usr/bin/env bash
# Create or reuse .venv with memtier and its dev extras (hudi-rs included), and make sure
# Java (for Spark and the Hive Metastore) is present, the Trino and Presto servers and the Hive Metastore
# the interop tests start are cached (scripts/fetch_trino.sh, scripts/jvm/fetch_hms.sh, scripts/jvm/fetch_presto.sh), and so is the HDFS the
# HDFS tests start (scripts/jvm/fetch_hadoop.sh), and so are Apache Hudi on Spark's venv and bundle
# (scripts/jvm/hudi_spark_setup.sh). Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "memtier needs Python 3.11+ (found: $("$PYTHON" --version 2>&1))" >&2
    exit 1
fi

if ! command -v java >/dev/null 2>&1; then
    echo "==> installing Java 17 (Spark needs it)"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv"
    "$PYTHON" -m venv .venv
fi

stamp=.venv/.memtier-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "==> installing memtier[dev] into .venv"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[dev]'
    touch "$stamp"
fi

scripts/fetch_trino.sh
scripts/jvm/fetch_hms.sh
scripts/jvm/fetch_presto.sh
scripts/jvm/fetch_hadoop.sh
scripts/jvm/hudi_spark_setup.sh >/dev/null
