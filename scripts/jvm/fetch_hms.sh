#!/usr/bin/env bash
# Fetch a Hive Metastore the catalog-sync tests start: Apache Hive's standalone metastore server
# and what it needs at run time (Hadoop's common and HDFS jars, embedded Derby as its database), from
# Maven Central through the machine's mvn, into .cache/hms/hive-metastore-<version>/lib.
# Java 17 (scripts/setup.sh) runs it. Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

VERSION="${MEMTIER_HMS_VERSION:-4.0.1}"
HADOOP_VERSION=3.3.6  # the Hadoop this Hive release builds against
HOME_DIR=.cache/hms/hive-metastore-$VERSION

[ -f "$HOME_DIR/.complete" ] && exit 0
command -v mvn >/dev/null 2>&1 || { echo "fetching the Hive Metastore needs Maven (mvn); apt-get install maven" >&2; exit 1; }
echo "==> fetching the Hive Metastore $VERSION (mvn, Maven Central) into $HOME_DIR"
rm -rf "$HOME_DIR"
mkdir -p "$HOME_DIR"
# Hadoop's web servers, ZooKeeper, Kerberos server and logging back ends: never run here.
EXCLUDED=""
for excluded in org.eclipse.jetty:'*' com.sun.jersey:'*' org.apache.zookeeper:'*' org.apache.curator:'*' \
        org.apache.kerby:'*' ch.qos.reload4j:'*' org.slf4j:slf4j-reload4j io.netty:'*'; do
    EXCLUDED+="<exclusion><groupId>${excluded%%:*}</groupId><artifactId>${excluded#*:}</artifactId></exclusion>"
done
# A pom whose dependencies are the server's run-time classpath; Hadoop is optional in the
# server's own pom, and only the classes of its common and HDFS jars are needed (no HDFS, YARN or MapReduce runs).
cat > "$HOME_DIR/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>memtier.test</groupId>
  <artifactId>hive-metastore-runtime</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.hive</groupId>
      <artifactId>hive-standalone-metastore-server</artifactId>
      <version>$VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.hadoop</groupId>
      <artifactId>hadoop-hdfs</artifactId>
      <version>$HADOOP_VERSION</version>
      <exclusions>$EXCLUDED</exclusions>
    </dependency>
    <dependency>
      <groupId>org.apache.hadoop</groupId>
      <artifactId>hadoop-common</artifactId>
      <version>$HADOOP_VERSION</version>
      <exclusions>$EXCLUDED</exclusions>
    </dependency>
  </dependencies>
</project>
POM
mvn -B -q -f "$HOME_DIR/pom.xml" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory=lib
touch "$HOME_DIR/.complete"
