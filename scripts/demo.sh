#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the main job: `memtier demo` streams upserts into a
# local memtier cluster, shows how fresh reads are, flushes to Hudi and reads the table
# back with hudi-rs. Extra arguments go to the demo, e.g. scripts/demo.sh --seconds 10.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/memtier demo "$@"
