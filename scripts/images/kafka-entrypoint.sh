#!/bin/bash
# Entrypoint of the oxbow/kafka image that scripts/images.sh builds: a
# single-node Apache Kafka (KRaft, combined broker+controller) for tests, run
# with `docker run --network host`, so every address is on the host.
#
# It writes /opt/kafka/config/server.properties and log4j2.properties from
# the environment, formats the log dir(s) the first time (KRaft StorageTool,
# with a cluster id generated once), then execs the broker in the foreground,
# logging to stdout. The broker logs "Kafka Server started" once it is up.
#
#   OXBOW_KAFKA_PORT             9092        broker listener (PLAINTEXT)
#   OXBOW_KAFKA_CONTROLLER_PORT  9093        KRaft controller listener (CONTROLLER)
#   OXBOW_KAFKA_LISTEN_HOST      127.0.0.1   address both listeners bind
#   OXBOW_KAFKA_ADVERTISED_HOST  127.0.0.1   host in advertised.listeners
#   OXBOW_KAFKA_HEAP             -Xms256m -Xmx512m
#   KAFKA_<NAME>=VALUE           any server property, overriding the defaults
#                                below (apache/kafka's image convention: drop
#                                KAFKA_, lowercase, ___ -> '-', __ -> '_',
#                                _ -> '.'; KAFKA_AUTO_CREATE_TOPICS_ENABLE=false
#                                is auto.create.topics.enable=false)
#   CLUSTER_ID                   cluster id for the first format (default: random)
#
# These KAFKA_* variables are JVM/logging settings, not properties:
#   KAFKA_HEAP_OPTS              replaces OXBOW_KAFKA_HEAP
#   KAFKA_JVM_PERFORMANCE_OPTS   replaces the GC flags below
#   KAFKA_OPTS                   more JVM arguments
#   KAFKA_LOG4J_ROOT_LOGLEVEL    root log level (INFO); the "Kafka Server
#                                started" logger stays at INFO regardless
#   KAFKA_LOG4J_LOGGERS          "logger=LEVEL,logger=LEVEL"
# and KAFKA_GC_LOG_OPTS, KAFKA_JMX_OPTS, KAFKA_LOG4J_OPTS, KAFKA_DEBUG,
# KAFKA_VERSION, KAFKA_HOME are ignored.
#
# With arguments, the container runs them instead of the broker (for example
# `kafka-class org.apache.kafka.tools.TopicCommand --bootstrap-server ... --list`).
set -euo pipefail

KAFKA_DIR=/opt/kafka
CONFIG_DIR="${KAFKA_DIR}/config"
STATE_DIR=/var/lib/kafka

log() { echo "kafka-entrypoint: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

if [ $# -gt 0 ]; then
	exec "$@"
fi

port="${OXBOW_KAFKA_PORT:-9092}"
controller_port="${OXBOW_KAFKA_CONTROLLER_PORT:-9093}"
listen_host="${OXBOW_KAFKA_LISTEN_HOST:-127.0.0.1}"
advertised_host="${OXBOW_KAFKA_ADVERTISED_HOST:-127.0.0.1}"
for p in "$port" "$controller_port"; do
	[[ "$p" =~ ^[0-9]+$ ]] || die "not a port number: '${p}'"
done
# The controller's voter address must be one to connect to, not a wildcard.
voter_host="$listen_host"
case "$listen_host" in
0.0.0.0 | "" | "::" | "[::]") voter_host="$advertised_host" ;;
esac

# ---------------------------------------------------------------------------
# server.properties: defaults, then every KAFKA_* variable.

declare -A props=()
declare -a order=()
set_prop() {
	[[ -v "props[$1]" ]] || order+=("$1")
	props["$1"]="$2"
}

set_prop process.roles broker,controller
set_prop node.id 1
set_prop controller.quorum.voters "1@${voter_host}:${controller_port}"
set_prop listeners "PLAINTEXT://${listen_host}:${port},CONTROLLER://${listen_host}:${controller_port}"
set_prop advertised.listeners "PLAINTEXT://${advertised_host}:${port}"
set_prop listener.security.protocol.map CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
set_prop controller.listener.names CONTROLLER
set_prop inter.broker.listener.name PLAINTEXT
set_prop log.dirs "${STATE_DIR}/data"
# One broker: every internal topic has one replica.
set_prop num.partitions 1
set_prop default.replication.factor 1
set_prop min.insync.replicas 1
set_prop offsets.topic.replication.factor 1
set_prop transaction.state.log.replication.factor 1
set_prop transaction.state.log.min.isr 1
set_prop share.coordinator.state.topic.replication.factor 1
set_prop share.coordinator.state.topic.min.isr 1

while IFS= read -r var; do
	case "$var" in
	KAFKA_HEAP_OPTS | KAFKA_JVM_PERFORMANCE_OPTS | KAFKA_OPTS | KAFKA_GC_LOG_OPTS | KAFKA_JMX_OPTS | \
		KAFKA_LOG4J_OPTS | KAFKA_LOG4J_ROOT_LOGLEVEL | KAFKA_LOG4J_LOGGERS | KAFKA_DEBUG | \
		KAFKA_VERSION | KAFKA_HOME)
		continue
		;;
	KAFKA_?*) ;;
	*) continue ;;
	esac
	key="${var#KAFKA_}"
	key="${key,,}"
	key="${key//___/$'\x01'}"
	key="${key//__/$'\x02'}"
	key="${key//_/.}"
	key="${key//$'\x01'/-}"
	key="${key//$'\x02'/_}"
	set_prop "$key" "${!var}"
done < <(compgen -e | sort)

mkdir -p "$CONFIG_DIR" "$STATE_DIR"
{
	echo "# Written by kafka-entrypoint at $(date -u +%Y-%m-%dT%H:%M:%SZ) from the environment."
	for key in "${order[@]}"; do
		printf '%s=%s\n' "$key" "${props[$key]}"
	done
} >"${CONFIG_DIR}/server.properties"

{
	cat <<EOF
status = warn
dest = err
name = oxbow-kafka
appender.out.type = Console
appender.out.name = STDOUT
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = ${KAFKA_LOG4J_ROOT_LOGLEVEL:-INFO}
rootLogger.appenderRef.out.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
# "Kafka Server started" (the line to wait for) comes from this logger.
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
EOF
	n=0
	IFS=',' read -r -a loggers <<<"${KAFKA_LOG4J_LOGGERS:-}"
	for l in "${loggers[@]}"; do
		[[ "$l" == *=* ]] || continue
		n=$((n + 1))
		echo "logger.env${n}.name = ${l%%=*}"
		echo "logger.env${n}.level = ${l#*=}"
	done
} >"${CONFIG_DIR}/log4j2.properties"

# ---------------------------------------------------------------------------
# Format the log dir(s) unless every one already holds meta.properties.

IFS=',' read -r -a dirs <<<"${props[log.dirs]:-${props[log.dir]:-/tmp/kafka-logs}}"
if [ -n "${props[metadata.log.dir]:-}" ]; then
	dirs+=("${props[metadata.log.dir]}")
fi
need_format=0
for d in "${dirs[@]}"; do
	[ -f "${d}/meta.properties" ] || need_format=1
done

if [ "$need_format" = 1 ]; then
	cluster_id="${CLUSTER_ID:-}"
	if [ -z "$cluster_id" ] && [ -s "${STATE_DIR}/cluster.id" ]; then
		cluster_id="$(cat "${STATE_DIR}/cluster.id")"
	fi
	# A Kafka Uuid: 16 random bytes, unpadded URL-safe base64, not starting
	# with '-' (which the storage tool's argument parser takes for an option).
	while [ -z "$cluster_id" ] || [[ "$cluster_id" == -* ]]; do
		cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
	done
	echo "$cluster_id" >"${STATE_DIR}/cluster.id"
	log "formatting ${dirs[*]} (cluster id ${cluster_id})"
	# A short-lived JVM: C1 only and the serial GC start fastest.
	java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
		-Dlog4j2.configurationFile="${CONFIG_DIR}/log4j2.properties" -cp "${KAFKA_DIR}/libs/*" \
		kafka.tools.StorageTool format --ignore-formatted -t "$cluster_id" -c "${CONFIG_DIR}/server.properties" ||
		die "formatting the KRaft log dir failed"
fi

# ---------------------------------------------------------------------------

declare -a jvm=()
read -r -a heap <<<"${KAFKA_HEAP_OPTS:-${OXBOW_KAFKA_HEAP:--Xms256m -Xmx512m}}"
jvm+=("${heap[@]}")
read -r -a perf <<<"${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent}"
jvm+=("${perf[@]}")
jvm+=(-Djava.awt.headless=true -Dlog4j2.configurationFile="${CONFIG_DIR}/log4j2.properties"
	-Dkafka.logs.dir="${STATE_DIR}/logs")
if [ -n "${KAFKA_OPTS:-}" ]; then
	read -r -a extra <<<"$KAFKA_OPTS"
	jvm+=("${extra[@]}")
fi

log "starting Kafka ${OXBOW_KAFKA_VERSION:-?} on ${listen_host}:${port} (controller ${listen_host}:${controller_port}, advertised ${advertised_host}:${port})"
cd "$STATE_DIR"
exec java "${jvm[@]}" -cp "${KAFKA_DIR}/libs/*" kafka.Kafka "${CONFIG_DIR}/server.properties"
