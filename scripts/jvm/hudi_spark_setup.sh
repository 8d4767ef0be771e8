#!/usr/bin/env bash
# Make Apache Hudi on Spark runnable here, from nothing, under the ignored .cache/hudi-spark/:
#   venv/  a Python venv with PySpark 3.5 (Hudi's Spark bundle must match Spark's minor
#          version, and the project venv's PySpark is 4.x, which no Hudi 1.0 bundle supports);
#   jars/  the Hudi Spark bundle of each version asked for, side by side, fetched from Maven
#          Central with the machine's `mvn`.
# Usage: hudi_spark_setup.sh [HUDI_VERSION]  (default 1.0.2; 1.0.2, 1.1.1 and 1.2.0 are tested)
# Safe to run again: it only does what is missing. Java 17 (scripts/setup.sh) runs Spark 3.5.
# Prints one JSON line last: {"python": ..., "jar": ..., "hudi": ..., "spark": ...}.
set -euo pipefail
cd "$(dirname "$0")/../.."

HUDI_VERSION="${1:-1.0.2}"
if [[ ! "$HUDI_VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    echo "hudi_spark_setup.sh: a Hudi version is MAJOR.MINOR.PATCH (e.g. 1.1.1), got '$HUDI_VERSION'" >&2
    exit 2
fi
PYSPARK_VERSION=3.5.3
BUNDLE="org.apache.hudi:hudi-spark3.5-bundle_2.12:${HUDI_VERSION}"
cache="$PWD/.cache/hudi-spark"
venv="$cache/venv"
jar="$cache/jars/hudi-spark3.5-bundle_2.12-${HUDI_VERSION}.jar"
requirements="pyspark==${PYSPARK_VERSION}"
PYTHON="${PYTHON:-python3}"

mkdir -p "$cache/jars"
if [[ ! -x "$venv/bin/python" || ! -f "$venv/.requirements" || "$(cat "$venv/.requirements")" != "$requirements" ]]; then
    echo "==> creating $venv with $requirements (its 320 MB source built into a wheel: a minute or two the first time)" >&2
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip >&2
    "$PYTHON" scripts/progress.py "$venv/bin/python" -m pip install --progress-bar raw "$requirements" >&2
    echo "$requirements" > "$venv/.requirements"
fi
if [[ ! -s "$jar" ]]; then
    echo "==> fetching $BUNDLE (mvn, Maven Central, about 110 MB) into $cache/jars" >&2
    "$PYTHON" scripts/progress.py mvn -Dstyle.color=never dependency:copy -Dartifact="$BUNDLE" \
        -DoutputDirectory="$cache/jars" -Dmdep.markersDirectory="$cache/markers" >&2
fi
printf '{"python": "%s", "jar": "%s", "hudi": "%s", "spark": "%s"}\n' \
    "$venv/bin/python" "$jar" "$HUDI_VERSION" "$PYSPARK_VERSION"
