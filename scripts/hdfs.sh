#!/usr/bin/env bash
# Run a real HDFS on this machine for trying memtier on hdfs://: Apache Hadoop's NameNode and
# three DataNodes (each its own JVM, replication 3) on 127.0.0.1, fetched from Maven Central
# on first use. Prints the hdfs:// URI and runs until Ctrl-C. Options: --datanodes N,
# --dir DIR (keep data and logs there; default: a temporary directory, removed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh hdfs >/dev/null  # the venv and Java; not every test server
scripts/jvm/fetch_hadoop.sh
exec .venv/bin/python -m tests.support.hdfs "$@"
