#!/usr/bin/env bash
# Set up everything the tests use (scripts/setup.sh: .venv with memtier[dev], Java, and the
# servers the interop tests start: Trino, Hive Metastores, Presto, Apache Hudi on Spark) and
# run the whole test suite, slow suites included. Extra arguments go to pytest, e.g.
# scripts/test.sh -m "not slow" for the fast loop. The 40 slowest tests are listed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
exec .venv/bin/python -m pytest --durations=40 "$@"
