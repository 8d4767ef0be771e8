#!/usr/bin/env bash
# Fetch what the HDFS tests run: Apache Hadoop's NameNode and DataNode (the hadoop-hdfs
# server jar with hadoop-common and their run-time dependencies) from Maven Central through
# the machine's mvn, into .cache/hadoop/hadoop-<version>/lib (and their web
# servers' webapps/ into .../web). tests/support/hdfs.py and
# scripts/hdfs.sh start them on Java 17 (scripts/setup.sh). Version: the argument, else
# $MEMTIER_HADOOP_VERSION, else 3.4.1. Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

VERSION="${1:-${MEMTIER_HADOOP_VERSION:-3.4.1}}"
HOME_DIR=.cache/hadoop/hadoop-$VERSION
[ -f "$HOME_DIR/.complete" ] && exit 0
command -v mvn >/dev/null 2>&1 || { echo "fetching Hadoop needs Maven (mvn); apt-get install maven" >&2; exit 1; }

echo "==> fetching Apache Hadoop $VERSION's HDFS daemons (mvn, Maven Central, ~100 MB) into $HOME_DIR"
rm -rf "$HOME_DIR"
mkdir -p "$HOME_DIR"
# A pom whose dependencies are the daemons' run-time classpath: the NameNode and DataNode
# live in hadoop-hdfs, the protocols they speak in hadoop-hdfs-client (a dependency
# hadoop-hdfs declares "provided"), their RPC, configuration and web servers in hadoop-common.
cat > "$HOME_DIR/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>memtier.test</groupId>
  <artifactId>hadoop-hdfs-runtime</artifactId>
  <version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-hdfs</artifactId><version>$VERSION</version></dependency>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-hdfs-client</artifactId><version>$VERSION</version></dependency>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-common</artifactId><version>$VERSION</version></dependency>
  </dependencies>
</project>
POM
# A first fetch downloads a few hundred artifacts: one progress line shows it moving.
python3 scripts/progress.py mvn -Dstyle.color=never -f "$HOME_DIR/pom.xml" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory=lib
# The daemons' web servers need their webapps/ on the classpath; Maven Central ships them only
# in hadoop-hdfs's tests jar, so that jar is fetched and its webapps/ kept (no test class).
mvn -B -q org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
    "-Dartifact=org.apache.hadoop:hadoop-hdfs:$VERSION:jar:tests" "-DoutputDirectory=$HOME_DIR/download" \
    "-Dmdep.markersDirectory=$HOME_DIR/download/markers"
python3 - "$HOME_DIR/download/hadoop-hdfs-$VERSION-tests.jar" "$HOME_DIR/web" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as jar:
    jar.extractall(sys.argv[2], [n for n in jar.namelist() if n.startswith("webapps/")])
PY
rm -rf "$HOME_DIR/download"
[ -n "$(ls "$HOME_DIR"/lib/hadoop-hdfs-"$VERSION".jar 2>/dev/null)" ] || {
    echo "fetching Hadoop $VERSION failed: no hadoop-hdfs-$VERSION.jar in $HOME_DIR/lib" >&2; exit 1; }
touch "$HOME_DIR/.complete"
