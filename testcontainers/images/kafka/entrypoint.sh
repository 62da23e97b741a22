#!/bin/sh
# Entry point of tarn-test/kafka (built by scripts/images.sh from the cached Kafka jars and a JRE
# linked from the machine's JDK). It takes broker settings from the environment as the
# apache/kafka image does: KAFKA_FOO_BAR=v becomes foo.bar=v (KAFKA_A__B is a_b, KAFKA_A___B is
# a-b); KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS and KAFKA_OPTS go to the JVM. It formats the
# KRaft log folder on first start (CLUSTER_ID, or a fixed id like apache/kafka's) and runs a
# broker in the foreground, logging to the console.
set -e
: "${KAFKA_LOG_DIRS:=/var/lib/kafka/data}"
export KAFKA_LOG_DIRS
conf=/var/lib/kafka/server.properties
env | sed -n 's/^KAFKA_\([A-Z0-9_]*\)=/\1=/p' | while IFS= read -r line; do
	name="${line%%=*}"
	case "$name" in
	HEAP_OPTS | JVM_PERFORMANCE_OPTS | OPTS | GC_LOG_OPTS | LOG4J_OPTS | JMX_OPTS | VERSION) continue ;;
	esac
	key="$(printf '%s' "$name" | tr 'A-Z' 'a-z' | sed 's/___/-/g; s/__/\x01/g; s/_/./g; s/\x01/_/g')"
	printf '%s=%s\n' "$key" "${line#*=}"
done >"$conf"

java="/opt/java/bin/java"
classpath="/opt/kafka/libs/*"
log4j="-Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties"
if [ ! -f "$KAFKA_LOG_DIRS/meta.properties" ]; then
	"$java" -Xmx256m "$log4j" -cp "$classpath" kafka.tools.StorageTool format \
		-t "${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}" -c "$conf" >/dev/null
fi
# The option variables hold several JVM flags each: split them on spaces.
# shellcheck disable=SC2086
exec "$java" ${KAFKA_HEAP_OPTS:--Xms512m -Xmx512m} ${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20} \
	${KAFKA_OPTS:-} -Djava.awt.headless=true "$log4j" -cp "$classpath" kafka.Kafka "$conf"
