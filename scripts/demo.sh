#!/usr/bin/env bash
# Set up what the demo uses (scripts/setup.sh demo: .venv with memtier, Ray and hudi-rs;
# with --spark also PySpark and Java) and run the main job: `memtier demo` streams upserts
# into a local memtier cluster, shows how fresh reads are, flushes to Hudi and reads the
# table back with hudi-rs; `memtier demo --spark` does it with a Spark pipeline. Extra
# arguments go to the demo, e.g. scripts/demo.sh --seconds 10.
set -euo pipefail
cd "$(dirname "$0")/.."
need=demo
for arg in "$@"; do
    if [ "$arg" = --spark ]; then need=demo-spark; fi
done
scripts/setup.sh "$need"
exec .venv/bin/memtier demo "$@"
