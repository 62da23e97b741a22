#!/usr/bin/env bash
# Fetches the Apache Kafka broker jars (org.apache.kafka:kafka_2.13 and its runtime dependencies)
# from Maven Central into a cache outside the repository, once. Prints the jar folder.
#
#   TARN_KAFKA_VERSION  Kafka version (default 4.1.1)
#   TARN_CACHE          cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/tarn)
set -euo pipefail

version="${TARN_KAFKA_VERSION:-4.1.1}"
cache="${TARN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tarn}"
dest="$cache/kafka-$version"
libs="$dest/libs"

if [[ -f "$dest/.complete-slf4j1" ]]; then
	echo "$libs"
	exit 0
fi

command -v mvn >/dev/null || { echo "kafka-jars: mvn not found; install Maven (apt-get install maven)" >&2; exit 1; }
mkdir -p "$dest"
cat >"$dest/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.tarn</groupId>
  <artifactId>kafka-broker-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
POM
echo "kafka-jars: fetching Kafka $version from Maven Central into $libs" >&2
rm -rf "$libs"
mvn -B -q -f "$dest/pom.xml" dependency:copy-dependencies \
	-DoutputDirectory="$libs" -DincludeScope=runtime >"$dest/mvn.log" 2>&1 || {
	echo "kafka-jars: mvn failed; last lines of $dest/mvn.log:" >&2
	tail -n 30 "$dest/mvn.log" >&2
	exit 1
}
touch "$dest/.complete-slf4j1"
echo "$libs"
