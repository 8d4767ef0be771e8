#!/usr/bin/env bash
# Create or reuse .venv with memtier and its dev extras (hudi-rs included), and make sure
# Java (for Spark and the Hive Metastore) is present, the Trino and Presto servers and the Hive Metastore
# the interop tests start are cached (scripts/fetch_trino.sh, scripts/jvm/fetch_hms.sh, scripts/jvm/fetch_presto.sh), and so is the HDFS the
# HDFS tests start (scripts/jvm/fetch_hadoop.sh), and so are Apache Hudi on Spark's venv and bundle
# (scripts/jvm/hudi_spark_setup.sh). Safe to run again: it only does what is missing.
# That is what the tests need (scripts/test.sh). A use that needs less asks for it:
#   scripts/setup.sh demo        .venv with memtier, Ray and hudi-rs: what `memtier demo` imports
#   scripts/setup.sh demo-spark  ... and PySpark, and Java: `memtier demo --spark`
#   scripts/setup.sh hdfs        the tests' .venv and Java, no test server: scripts/hdfs.sh
set -euo pipefail
cd "$(dirname "$0")/.."

NEED="${1:-test}"
case "$NEED" in  # the extras to install, and the extras that include them
    demo) EXTRAS=demo; COVERED_BY="demo demo,spark dev"; DOWNLOAD="about 250 MB" ;;
    demo-spark) EXTRAS=demo,spark; COVERED_BY="demo,spark dev"
        DOWNLOAD="about 700 MB, PySpark's 450 MB source built into a wheel" ;;
    test|hdfs) EXTRAS=dev; COVERED_BY=dev; DOWNLOAD="about 800 MB, PySpark's 450 MB source built into a wheel" ;;
    *) echo "usage: scripts/setup.sh [demo|demo-spark|hdfs|test]" >&2; exit 2 ;;
esac

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "memtier needs Python 3.11+ (found: $("$PYTHON" --version 2>&1))" >&2
    exit 1
fi

if [ "$NEED" != demo ] && ! command -v java >/dev/null 2>&1; then
    echo "==> installing Java 17 (openjdk-17-jre-headless, about 50 MB; Spark needs it) with apt-get"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO "$PYTHON" scripts/progress.py apt-get install -y openjdk-17-jre-headless
fi

if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv"
    "$PYTHON" -m venv .venv
fi

installed() {  # memtier with these extras (or more) was installed since pyproject.toml changed
    local extras
    for extras in $COVERED_BY; do
        [ -f ".venv/.memtier-installed-$extras" ] && [ ! pyproject.toml -nt ".venv/.memtier-installed-$extras" ] && return 0
    done
    return 1
}
if ! installed; then
    .venv/bin/python -m pip install -q --upgrade pip  # a pip that shows its progress raw
    echo "==> installing memtier[$EXTRAS] into .venv with pip ($DOWNLOAD, less what pip has cached)"
    "$PYTHON" scripts/progress.py .venv/bin/python -m pip install --progress-bar raw -e ".[$EXTRAS]"
    touch ".venv/.memtier-installed-$EXTRAS"
fi

[ "$NEED" = test ] || exit 0  # what follows only the tests use

if [ "$(id -u)" -eq 0 ] && { ! command -v nft >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1; }; then
    echo "==> installing iproute2 and nftables (about 2 MB; the multi-host tests make hosts in network namespaces) with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "$PYTHON" scripts/progress.py apt-get install -y iproute2 nftables
fi

scripts/fetch_trino.sh
scripts/jvm/fetch_hms.sh
scripts/jvm/fetch_presto.sh
scripts/jvm/fetch_hadoop.sh
scripts/jvm/hudi_spark_setup.sh >/dev/null
