#!/usr/bin/env bash
# Fetch the Hive Metastores the catalog-sync tests start: Apache Hive's standalone metastore
# server and what it needs at run time (Hadoop's common and HDFS jars, Hadoop's HDFS client so
# that it takes tables at hdfs:// locations, embedded Derby as its database), from Maven
# Central through the machine's mvn, into
# .cache/hms/hive-metastore-<version>/lib. Versions: the arguments, else 3.1.3 and 4.0.1.
# Java 17 (scripts/setup.sh) runs them. Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

command -v mvn >/dev/null 2>&1 || { echo "fetching the Hive Metastore needs Maven (mvn); apt-get install maven" >&2; exit 1; }

# Hadoop's web servers, ZooKeeper, Kerberos server, Netty and logging back ends: never run here.
EXCLUDED=""
for excluded in org.eclipse.jetty:'*' com.sun.jersey:'*' org.apache.zookeeper:'*' org.apache.curator:'*' \
        org.apache.kerby:'*' ch.qos.reload4j:'*' org.slf4j:slf4j-reload4j io.netty:'*'; do
    EXCLUDED+="<exclusion><groupId>${excluded%%:*}</groupId><artifactId>${excluded#*:}</artifactId></exclusion>"
done

# The Hadoop that a Hive release builds against (the version of the Hadoop jars fetched with it).
hadoop_of() {
    case "$1" in 3.*) echo 3.1.0 ;; *) echo 3.3.6 ;; esac
}

# Hadoop's HDFS client (DistributedFileSystem, the hdfs:// scheme): hadoop-hdfs has it only as a
# "provided" dependency, so the runtime classpath above lacks it, and a metastore refuses a table
# at an hdfs:// location ("No FileSystem for scheme: hdfs"). Its one jar, of the same Hadoop
# version; what it needs (hadoop-common, protobuf, Jackson) is there already. Fetched on its own
# so that a metastore fetched before it was added gets it too, and nothing else again.
fetch_hdfs_client() {
    local version=$1 hadoop home
    hadoop=$(hadoop_of "$version")
    home=.cache/hms/hive-metastore-$version
    [ -f "$home/lib/hadoop-hdfs-client-$hadoop.jar" ] && return 0
    echo "==> fetching Hadoop's HDFS client $hadoop (mvn, Maven Central, about 5 MB) into $home/lib"
    # into a folder of its own, then renamed into lib: a metastore started meanwhile (the cache
    # may be shared by a running suite) never sees half a jar
    rm -rf "$home/.hdfs-client"
    python3 scripts/progress.py mvn -Dstyle.color=never -f "$home/pom.xml" \
        org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
        -Dartifact="org.apache.hadoop:hadoop-hdfs-client:$hadoop" -DoutputDirectory=.hdfs-client
    mv "$home/.hdfs-client/hadoop-hdfs-client-$hadoop.jar" "$home/lib/"
    rmdir "$home/.hdfs-client"
}

fetch() {
    local version=$1 artifact hadoop home size
    hadoop=$(hadoop_of "$version")
    case "$version" in  # the server's artifact
        3.*) artifact=hive-standalone-metastore; size="about 50 MB" ;;
        *) artifact=hive-standalone-metastore-server; size="about 125 MB" ;;
    esac
    home=.cache/hms/hive-metastore-$version
    [ -f "$home/.complete" ] && return 0
    echo "==> fetching the Hive Metastore $version and its Hadoop jars (mvn, Maven Central, $size) into $home"
    rm -rf "$home"
    mkdir -p "$home"
    # A pom whose dependencies are the server's run-time classpath. Hadoop is optional in the
    # server's own pom; only classes of its common and HDFS jars are used (no HDFS runs).
    local hadoop_dependencies=""
    for module in hadoop-common hadoop-hdfs; do
        hadoop_dependencies+="<dependency><groupId>org.apache.hadoop</groupId><artifactId>$module</artifactId>"
        hadoop_dependencies+="<version>$hadoop</version><exclusions>$EXCLUDED</exclusions></dependency>"
    done
    cat > "$home/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>memtier.test</groupId>
  <artifactId>hive-metastore-runtime</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.hive</groupId>
      <artifactId>$artifact</artifactId>
      <version>$version</version>
    </dependency>
    $hadoop_dependencies
  </dependencies>
</project>
POM
    python3 scripts/progress.py mvn -Dstyle.color=never -f "$home/pom.xml" \
        org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory=lib
    touch "$home/.complete"
}

versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.1.3 4.0.1)
for version in "${versions[@]}"; do
    fetch "$version"
    fetch_hdfs_client "$version"
done
