#!/usr/bin/env bash
# Starts and stops the real components Oxbow's integration tests use, on this
# machine, without Docker: a single-node Apache Kafka broker (KRaft, combined
# broker+controller, jars fetched from Maven Central with Maven), a
# PostgreSQL server (Debian's packages) with logical replication enabled, and
# a schema registry (Apicurio Registry 2.4.2, built once from Maven Central,
# serving Confluent's API at /apis/ccompat/v7, in memory, compatibility
# BACKWARD).
#
#   scripts/services.sh start  [kafka|postgres|registry|all]   # default: all
#   scripts/services.sh stop   [kafka|postgres|registry|all]
#   scripts/services.sh restart postgres               # restart, keeping the data
#   scripts/services.sh status [kafka|postgres|registry|all]   # exit 1 if one is not running
#   scripts/services.sh env                            # export lines, for eval
#   scripts/services.sh kafka-class CLASS [ARGS...]    # run a Kafka tool class
#   scripts/services.sh fetch kafka                    # only fetch Kafka's jars (images.sh)
#   scripts/services.sh start|stop|status kafka-cluster|kafka-solo
#       three nodes (or one) apart from the default broker, for fault campaigns
#   scripts/services.sh node kafka-cluster|kafka-solo N kill|stop|start|pause|resume|pid
#   OXBOW_KAFKA_NET_HOSTS=ns1=ip1,ns2=ip2,ns3=ip3 scripts/services.sh start kafka-net
#       three nodes in network namespaces a test made (internal/faultnet),
#       node i on ip_i:9092 in ns_i; stop, status and node work as above
#
# Beside the plaintext/trust side (PLAINTEXT 127.0.0.1:9092, postgres@5432 with
# trust), both have a secured side, for tests of TLS, SASL, mTLS and ACLs:
#   Kafka   SASL_SSL 127.0.0.1:9094 (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER with
#           Kafka's unsecured validator) and SSL 127.0.0.1:9095 (client
#           certificate required; its CN is the principal); ACLs enforced
#           (StandardAuthorizer), super users User:ANONYMOUS (PLAINTEXT and
#           CONTROLLER listeners) and User:admin; User:oxbow-app has no ACL.
#   Postgres ssl=on; role oxbow_secure (LOGIN REPLICATION CREATEDB) only over
#           TLS with scram-sha-256, refused without TLS.
# Test-only: a CA made here, kept in .cache/run/secure with the certificates,
# passwords new on every start (<user>.password, 0600) and client properties
# files (admin.properties, app.properties, mtls.properties); `env` prints
# OXBOW_SECURE_DIR, OXBOW_KAFKA_SASL_SSL, OXBOW_KAFKA_MTLS, OXBOW_PG_SECURE_DSN.
#
# Everything it downloads or creates lives under .cache/ in the repository
# (OXBOW_CACHE_DIR overrides). See scripts/README.md for the variables.
set -euo pipefail

SCRIPT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
REPO_DIR="$(dirname "$(dirname "$SCRIPT")")"
CACHE_DIR="${OXBOW_CACHE_DIR:-${REPO_DIR}/.cache}"
RUN_DIR="${CACHE_DIR}/run"

KAFKA_VERSION="${OXBOW_KAFKA_VERSION:-4.4.0}"
KAFKA_PORT="${OXBOW_KAFKA_PORT:-9092}"
KAFKA_CONTROLLER_PORT="${OXBOW_KAFKA_CONTROLLER_PORT:-$((KAFKA_PORT + 1))}"
KAFKA_HEAP="${OXBOW_KAFKA_HEAP:--Xms256m -Xmx512m}"
KAFKA_START_TIMEOUT="${OXBOW_KAFKA_START_TIMEOUT:-180}"
KAFKA_HOME="${CACHE_DIR}/kafka/${KAFKA_VERSION}"
KAFKA_LIBS="${KAFKA_HOME}/libs"
KAFKA_RUN="${RUN_DIR}/kafka"
# The secured listeners of the default broker: SASL_SSL (PLAIN, SCRAM-SHA-256,
# SCRAM-SHA-512, OAUTHBEARER; no client certificate) and SSL with a client
# certificate required (mTLS).
KAFKA_SASL_PORT="${OXBOW_KAFKA_SASL_PORT:-$((KAFKA_PORT + 2))}"
KAFKA_MTLS_PORT="${OXBOW_KAFKA_MTLS_PORT:-$((KAFKA_PORT + 3))}"

PG_PORT="${OXBOW_PG_PORT:-5432}"
PG_DB=oxbow
PG_START_TIMEOUT="${OXBOW_PG_START_TIMEOUT:-60}"
# The PostgreSQL run dir must be reachable by the 'postgres' user; when the
# cache is not (a clone under /root, say) it falls back to a dir under /tmp,
# and this file remembers where it went.
PG_RUN_POINTER="${RUN_DIR}/postgres.path"

REGISTRY_VERSION=2.4.2.Final
REGISTRY_PORT="${OXBOW_REGISTRY_PORT:-8085}"
REGISTRY_HEAP="${OXBOW_REGISTRY_HEAP:--Xms64m -Xmx384m}"
REGISTRY_START_TIMEOUT="${OXBOW_REGISTRY_START_TIMEOUT:-120}"
REGISTRY_HOME="${CACHE_DIR}/registry/${REGISTRY_VERSION}"
REGISTRY_RUN="${RUN_DIR}/registry"

STOP_TIMEOUT="${OXBOW_STOP_TIMEOUT:-30}"

# Test-only certificates (a CA of our own, kept while the dir exists), the
# users' passwords (new on every start) and client properties files, shared by
# Kafka and PostgreSQL. An absolute path: Kafka's config and the env lines name it.
SECURE_DIR="${RUN_DIR}/secure"
case "$SECURE_DIR" in
/*) ;;
*) SECURE_DIR="${PWD}/${SECURE_DIR}" ;;
esac
# The users of the secured side, and what they can do: see scripts/README.md.
KAFKA_ADMIN_USER="admin"
KAFKA_APP_USER="oxbow-app"
PG_SECURE_USER="oxbow_secure"

info() { echo "services: $*"; }
warn() { echo "services: warning: $*" >&2; }
die() {
	echo "services: error: $*" >&2
	exit 1
}

# ---------------------------------------------------------------------------
# helpers

# shellcheck source=scripts/lib.sh
source "$(dirname "$SCRIPT")/lib.sh"

with_lock() {
	mkdir -p "$RUN_DIR"
	exec 9>"${RUN_DIR}/.lock"
	flock -w 600 9 || die "could not lock ${RUN_DIR}/.lock (another services.sh running?)"
}

# ---------------------------------------------------------------------------
# The secured side: a test-only CA, certificates and passwords in SECURE_DIR.
# Called from start (and restart postgres), which hold the lock.

# secure_random: a new random password (hex: nothing to quote in JAAS, in
# --add-scram's [name=...,password=...] nor in SQL).
secure_random() {
	openssl rand -hex 16
}

# secure_write_secret FILE VALUE: FILE holds VALUE, no newline, mode 0600,
# replaced whole (a reader sees the old or the new one).
secure_write_secret() {
	local tmp="$1.tmp.$$"
	(
		umask 077
		printf '%s' "$2" >"$tmp"
	)
	mv -f "$tmp" "$1"
}

# secure_openssl_cnf: the extensions of the CA and of the leaf certificates.
secure_openssl_cnf() {
	cat >"${SECURE_DIR}/openssl.cnf" <<'CNF'
# Written by scripts/services.sh: extensions of the test-only certificates.
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
CNF
}

# secure_leaf NAME CN PROFILE: NAME.key (EC P-256, PKCS#8, 0600) and NAME.pem
# (signed by the CA, extensions of PROFILE: server or client), both replaced
# whole.
secure_leaf() {
	local name="$1" cn="$2" profile="$3" d="$SECURE_DIR" tmp="${SECURE_DIR}/.${1}.$$"
	(
		umask 077
		openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
			-keyout "${tmp}.key" -out "${tmp}.csr" -subj "/CN=${cn}" \
			-config "${d}/openssl.cnf" 2>"${tmp}.err"
	) || {
		cat "${tmp}.err" >&2
		rm -f "${tmp}".*
		die "secure: could not make a key for ${name}"
	}
	openssl x509 -req -in "${tmp}.csr" -CA "${d}/ca.pem" -CAkey "${d}/ca.key" \
		-set_serial "0x$(openssl rand -hex 16)" -days 825 -sha256 \
		-extfile "${d}/openssl.cnf" -extensions "$profile" -out "${tmp}.pem" 2>"${tmp}.err" || {
		cat "${tmp}.err" >&2
		rm -f "${tmp}".*
		die "secure: could not sign the certificate of ${name}"
	}
	chmod 0644 "${tmp}.pem"
	mv -f "${tmp}.key" "${d}/${name}.key"
	mv -f "${tmp}.pem" "${d}/${name}.pem"
	rm -f "${tmp}.csr" "${tmp}.err"
}

# secure_valid NAME: NAME.pem exists, is signed by the current CA and is
# valid for at least a day more, and NAME.key exists.
secure_valid() {
	[ -s "${SECURE_DIR}/$1.pem" ] && [ -s "${SECURE_DIR}/$1.key" ] &&
		openssl verify -CAfile "${SECURE_DIR}/ca.pem" "${SECURE_DIR}/$1.pem" >/dev/null 2>&1 &&
		openssl x509 -noout -checkend 86400 -in "${SECURE_DIR}/$1.pem" >/dev/null 2>&1
}

# secure_init: SECURE_DIR with the CA (made once, kept while it is valid: the
# other service may be running with certificates it signed) and the client
# certificate CN=oxbow-app for Kafka's mTLS listener (made if missing or not
# from this CA).
secure_init() {
	local d="$SECURE_DIR"
	command -v openssl >/dev/null 2>&1 || die "secure: openssl not found (apt-get install openssl)"
	mkdir -p "$d"
	chmod 0755 "$d"
	secure_openssl_cnf
	if ! { [ -s "${d}/ca.pem" ] && [ -s "${d}/ca.key" ] &&
		openssl x509 -noout -checkend 86400 -in "${d}/ca.pem" >/dev/null 2>&1; }; then
		info "secure: making a test-only CA in ${d}"
		local tmp="${d}/.ca.$$"
		(
			umask 077
			openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
				-keyout "${tmp}.key" -out "${tmp}.pem" -days 3650 -sha256 \
				-subj "/O=Oxbow tests/CN=Oxbow test CA" \
				-config "${d}/openssl.cnf" -extensions ca 2>"${tmp}.err"
		) || {
			cat "${tmp}.err" >&2
			rm -f "${tmp}".*
			die "secure: could not make the CA"
		}
		chmod 0644 "${tmp}.pem"
		mv -f "${tmp}.key" "${d}/ca.key"
		mv -f "${tmp}.pem" "${d}/ca.pem"
		rm -f "${tmp}.err"
	fi
	if ! secure_valid client; then
		secure_leaf client "$KAFKA_APP_USER" client
	fi
}

# ---------------------------------------------------------------------------
# Kafka

find_java() {
	local java="${OXBOW_JAVA:-}"
	if [ -z "$java" ]; then
		if [ -n "${JAVA_HOME:-}" ] && [ -x "${JAVA_HOME}/bin/java" ]; then
			java="${JAVA_HOME}/bin/java"
		else
			java="$(command -v java || true)"
		fi
	fi
	if [ -z "$java" ] || [ ! -x "$java" ]; then
		die "no java found (set JAVA_HOME or OXBOW_JAVA); Kafka ${KAFKA_VERSION} needs Java 17+"
	fi
	local major
	major="$("$java" -version 2>&1 | sed -n '1s/.*version "\([0-9]*\).*/\1/p')"
	if [ -z "$major" ] || [ "$major" -lt 17 ]; then
		die "${java} is Java ${major:-?}; the Kafka ${KAFKA_VERSION} broker needs Java 17+"
	fi
	JAVA="$java"
}

# Fetch kafka_2.13 (broker + storage tool), kafka-tools and log4j2 with all
# their runtime dependencies into KAFKA_LIBS, once.
kafka_fetch() {
	if [ -f "${KAFKA_LIBS}/.complete" ]; then
		return 0
	fi
	command -v mvn >/dev/null 2>&1 || die "mvn not found: Maven is needed to fetch Kafka ${KAFKA_VERSION} from Maven Central"
	info "kafka: fetching org.apache.kafka:kafka_2.13:${KAFKA_VERSION} and its runtime dependencies (Maven Central)"
	mkdir -p "$KAFKA_HOME"
	# Run Maven on a copy of the pom so that nothing (target/) lands in scripts/.
	cp "${REPO_DIR}/scripts/kafka/pom.xml" "${KAFKA_HOME}/pom.xml"
	local tmp="${KAFKA_HOME}/libs.tmp" mlog="${KAFKA_HOME}/mvn.log" attempt ok=0
	for attempt in 1 2 3; do
		rm -rf "$tmp"
		if (cd "$KAFKA_HOME" && mvn -B -q -f pom.xml \
			-Dmaven.repo.local="${CACHE_DIR}/m2" \
			-Dkafka.version="$KAFKA_VERSION" \
			-Dmaven.wagon.http.retryHandler.count=3 \
			-Dstyle.color=never \
			dependency:copy-dependencies \
			-DincludeScope=runtime -DoutputDirectory="$tmp") >"$mlog" 2>&1; then
			ok=1
			break
		fi
		warn "kafka: mvn failed (attempt ${attempt}/3); last lines of ${mlog}:"
		tail -n 20 "$mlog" >&2 || true
		sleep $((attempt * 3))
	done
	[ "$ok" = 1 ] || die "kafka: could not fetch Kafka ${KAFKA_VERSION} with Maven (see ${mlog})"
	for jar in "kafka_2.13-${KAFKA_VERSION}.jar" "kafka-tools-${KAFKA_VERSION}.jar" "kafka-server-${KAFKA_VERSION}.jar"; do
		[ -f "${tmp}/${jar}" ] || die "kafka: ${jar} missing after mvn dependency:copy-dependencies (see ${mlog})"
	done
	ls "$tmp"/log4j-core-*.jar >/dev/null 2>&1 || die "kafka: log4j-core missing from ${tmp}"
	touch "${tmp}/.complete"
	rm -rf "$KAFKA_LIBS"
	mv "$tmp" "$KAFKA_LIBS"
	info "kafka: $(find "$KAFKA_LIBS" -name '*.jar' | wc -l) jars in ${KAFKA_LIBS}"
}

# kafka-class CLASS ARGS...: run a Kafka command-line class (TopicCommand,
# ConsoleProducer, ...) with the cached jars, logging warnings to stderr.
kafka_class() {
	[ -f "${KAFKA_LIBS}/.complete" ] || die "kafka: no jars in ${KAFKA_LIBS}; run '$0 start kafka' first"
	find_java
	local cfg="${KAFKA_HOME}/tools-log4j2.properties"
	if [ ! -f "$cfg" ]; then
		cat >"$cfg" <<'EOF'
status = warn
dest = err
name = oxbow-kafka-tools
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
EOF
	fi
	# Short-lived client JVMs: C1 only and the serial GC start fastest.
	"$JAVA" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
		-Dlog4j2.configurationFile="$cfg" -cp "${KAFKA_LIBS}/*" "$@"
}

kafka_pid() {
	local pid
	pid="$(cat "${KAFKA_RUN}/kafka.pid" 2>/dev/null)" || return 1
	proc_matches "$pid" kafka.Kafka "${KAFKA_RUN}/server.properties" || return 1
	echo "$pid"
}

kafka_address() {
	cat "${KAFKA_RUN}/address" 2>/dev/null || echo "127.0.0.1:${KAFKA_PORT}"
}

kafka_sasl_address() {
	cat "${KAFKA_RUN}/sasl-ssl.address" 2>/dev/null || echo "127.0.0.1:${KAFKA_SASL_PORT}"
}

kafka_mtls_address() {
	cat "${KAFKA_RUN}/mtls.address" 2>/dev/null || echo "127.0.0.1:${KAFKA_MTLS_PORT}"
}

# kafka_test_settings: the broker settings every node started here shares.
kafka_test_settings() {
	cat <<'EOF'
# Tests create their topics explicitly and want groups to form at once.
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000

# No deletion by age: tests and examples write records with fixed event
# times (2026-01-01, ...), which the default 7-day retention would delete
# at its next check (every 5 minutes), now and then between a test's write
# and its read.
log.retention.ms=-1

# Compaction on; the cleaner looks for work every second. Segment size/age,
# min.cleanable.dirty.ratio etc. are for each test to set on its topics.
log.cleaner.enable=true
log.cleaner.backoff.ms=1000
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=33554432

# A tiny machine.
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
EOF
}

# kafka_log4j NAME DIR: the broker's log4j2 configuration, logging to
# DIR/logs/server.log.
kafka_log4j() {
	cat >"$2/log4j2.properties" <<EOF
status = warn
dest = err
name = $1
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $2/logs/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.request.name = kafka.request.logger
logger.request.level = WARN
EOF
}

# kafka_secure_files: the broker's certificate and PKCS12 keystore, the
# client's PKCS12 keystore (for Java tools on the mTLS listener), new
# passwords for admin and oxbow-app, and the client properties files. Sets
# KAFKA_KEYSTORE_PASSWORD, KAFKA_ADMIN_PASSWORD and KAFKA_APP_PASSWORD.
kafka_secure_files() {
	local d="$SECURE_DIR" client_ks_password
	secure_init
	secure_leaf kafka-server localhost server
	KAFKA_KEYSTORE_PASSWORD="$(secure_random)"
	client_ks_password="$(secure_random)"
	(
		umask 077
		openssl pkcs12 -export -name kafka -in "${d}/kafka-server.pem" -inkey "${d}/kafka-server.key" \
			-certfile "${d}/ca.pem" -out "${d}/kafka-server.p12.tmp" -passout "pass:${KAFKA_KEYSTORE_PASSWORD}" &&
			mv -f "${d}/kafka-server.p12.tmp" "${d}/kafka-server.p12" &&
			openssl pkcs12 -export -name "$KAFKA_APP_USER" -in "${d}/client.pem" -inkey "${d}/client.key" \
				-certfile "${d}/ca.pem" -out "${d}/client.p12.tmp" -passout "pass:${client_ks_password}" &&
			mv -f "${d}/client.p12.tmp" "${d}/client.p12"
	) || die "secure: openssl pkcs12 -export failed"
	KAFKA_ADMIN_PASSWORD="$(secure_random)"
	KAFKA_APP_PASSWORD="$(secure_random)"
	secure_write_secret "${d}/${KAFKA_ADMIN_USER}.password" "$KAFKA_ADMIN_PASSWORD"
	secure_write_secret "${d}/${KAFKA_APP_USER}.password" "$KAFKA_APP_PASSWORD"
	local user password f
	for f in admin app; do
		if [ "$f" = admin ]; then
			user="$KAFKA_ADMIN_USER" password="$KAFKA_ADMIN_PASSWORD"
		else
			user="$KAFKA_APP_USER" password="$KAFKA_APP_PASSWORD"
		fi
		secure_write_secret "${d}/${f}.properties" "# Written by scripts/services.sh: ${user} on the SASL_SSL listener 127.0.0.1:${KAFKA_SASL_PORT}
# (SCRAM-SHA-512), for Kafka's tools: --command-config ${d}/${f}.properties
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"${user}\" password=\"${password}\";
ssl.truststore.type=PEM
ssl.truststore.location=${d}/ca.pem
"
	done
	secure_write_secret "${d}/mtls.properties" "# Written by scripts/services.sh: the client certificate (CN=${KAFKA_APP_USER}, User:${KAFKA_APP_USER})
# on the mTLS listener 127.0.0.1:${KAFKA_MTLS_PORT}, for Kafka's tools: --command-config ${d}/mtls.properties
security.protocol=SSL
ssl.keystore.type=PKCS12
ssl.keystore.location=${d}/client.p12
ssl.keystore.password=${client_ks_password}
ssl.key.password=${client_ks_password}
ssl.truststore.type=PEM
ssl.truststore.location=${d}/ca.pem
"
}

kafka_write_config() {
	cat >"${KAFKA_RUN}/server.properties" <<EOF
# Written by scripts/services.sh: a throwaway single-node KRaft cluster for tests.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:${KAFKA_CONTROLLER_PORT}
listeners=PLAINTEXT://127.0.0.1:${KAFKA_PORT},CONTROLLER://127.0.0.1:${KAFKA_CONTROLLER_PORT},SASL_SSL://127.0.0.1:${KAFKA_SASL_PORT},SSL://127.0.0.1:${KAFKA_MTLS_PORT}
advertised.listeners=PLAINTEXT://127.0.0.1:${KAFKA_PORT},SASL_SSL://127.0.0.1:${KAFKA_SASL_PORT},SSL://127.0.0.1:${KAFKA_MTLS_PORT}
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=${KAFKA_RUN}/data

# ---- The secured side (test-only certificates and passwords in ${SECURE_DIR}) ----
# ACLs are enforced; the PLAINTEXT and CONTROLLER listeners' principal is
# User:ANONYMOUS, a super user, so plaintext clients keep full access.
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:ANONYMOUS;User:${KAFKA_ADMIN_USER}
# TLS on SASL_SSL and SSL: the broker's certificate (SAN IP:127.0.0.1,
# DNS:localhost) signed by the test CA, which is also the truststore for
# client certificates. SSL requires one (mTLS); its CN is the principal.
ssl.keystore.type=PKCS12
ssl.keystore.location=${SECURE_DIR}/kafka-server.p12
ssl.keystore.password=${KAFKA_KEYSTORE_PASSWORD}
ssl.key.password=${KAFKA_KEYSTORE_PASSWORD}
ssl.truststore.type=PEM
ssl.truststore.location=${SECURE_DIR}/ca.pem
listener.name.ssl.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([^,]+).*\$/\$1/,DEFAULT
# SASL_SSL: PLAIN (users below), SCRAM (credentials added at format time),
# OAUTHBEARER with Kafka's unsecured validator (unsigned JWS, alg none; the
# sub claim is the principal): for tests only.
listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_${KAFKA_ADMIN_USER}="${KAFKA_ADMIN_PASSWORD}" user_${KAFKA_APP_USER}="${KAFKA_APP_PASSWORD}";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;

# One broker: every internal topic has one replica.
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1

$(kafka_test_settings)
EOF
	chmod 0600 "${KAFKA_RUN}/server.properties" # passwords
	kafka_log4j oxbow-kafka-broker "$KAFKA_RUN"
}

kafka_fail() {
	echo "services: error: kafka: $*" >&2
	echo "---- last 50 lines of ${KAFKA_RUN}/logs/server.log ----" >&2
	tail -n 50 "${KAFKA_RUN}/logs/server.log" >&2 2>/dev/null || true
	if [ -s "${KAFKA_RUN}/logs/kafka.out" ]; then
		echo "---- last 50 lines of ${KAFKA_RUN}/logs/kafka.out ----" >&2
		tail -n 50 "${KAFKA_RUN}/logs/kafka.out" >&2 || true
	fi
	kafka_stop >/dev/null 2>&1 || true
	exit 1
}

kafka_start() {
	local pid
	if pid="$(kafka_pid)"; then
		info "kafka: already running (pid ${pid}) at $(kafka_address)"
		return 0
	fi
	find_java
	kafka_fetch
	local p
	for p in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$KAFKA_SASL_PORT" "$KAFKA_MTLS_PORT"; do
		if port_open "$p"; then
			die "kafka: port 127.0.0.1:${p} is already in use by another process (set OXBOW_KAFKA_PORT / OXBOW_KAFKA_CONTROLLER_PORT / OXBOW_KAFKA_SASL_PORT / OXBOW_KAFKA_MTLS_PORT)"
		fi
	done

	local started=$SECONDS
	rm -rf "$KAFKA_RUN"
	mkdir -p "${KAFKA_RUN}/data" "${KAFKA_RUN}/logs"
	kafka_secure_files
	kafka_write_config

	# Format the KRaft log dir with a random cluster id (a Kafka Uuid: 16
	# random bytes, unpadded URL-safe base64), not starting with '-', which
	# the storage tool's argument parser takes for an option (a CI run in 64
	# failed so).
	local cluster_id
	cluster_id="-"
	while [[ "$cluster_id" == -* ]]; do
		cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
	done
	# The SCRAM credentials go into the metadata log at format time.
	local -a scram=() m u
	for m in SCRAM-SHA-256 SCRAM-SHA-512; do
		for u in "${KAFKA_ADMIN_USER}=${KAFKA_ADMIN_PASSWORD}" "${KAFKA_APP_USER}=${KAFKA_APP_PASSWORD}"; do
			scram+=(--add-scram "${m}=[name=${u%%=*},password=${u#*=}]")
		done
	done
	if ! kafka_class kafka.tools.StorageTool format -t "$cluster_id" \
		-c "${KAFKA_RUN}/server.properties" "${scram[@]}" >"${KAFKA_RUN}/logs/format.log" 2>&1; then
		cat "${KAFKA_RUN}/logs/format.log" >&2
		die "kafka: formatting the KRaft log dir failed"
	fi

	info "kafka: starting ${KAFKA_VERSION} on 127.0.0.1:${KAFKA_PORT} (controller 127.0.0.1:${KAFKA_CONTROLLER_PORT}, SASL_SSL 127.0.0.1:${KAFKA_SASL_PORT}, mTLS 127.0.0.1:${KAFKA_MTLS_PORT}, logs ${KAFKA_RUN}/logs)"
	local -a jvm_opts
	read -r -a jvm_opts <<<"$KAFKA_HEAP"
	jvm_opts+=(
		-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
		-XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true
		-Dlog4j2.configurationFile="${KAFKA_RUN}/log4j2.properties"
		-Dkafka.logs.dir="${KAFKA_RUN}/logs"
	)
	# A session of its own (setsid), detached from our stdio and our lock (fd
	# 9); the shell that setsid runs writes its own PID, then becomes the JVM.
	(
		cd "$KAFKA_RUN"
		# shellcheck disable=SC2016 # $$, $0 and $@ are the inner shell's
		setsid bash -c 'echo $$ >"$0/kafka.pid"; exec "$@"' "$KAFKA_RUN" \
			"$JAVA" "${jvm_opts[@]}" -cp "${KAFKA_LIBS}/*" kafka.Kafka "${KAFKA_RUN}/server.properties" \
			</dev/null >"${KAFKA_RUN}/logs/kafka.out" 2>&1 9>&- &
	)
	echo "127.0.0.1:${KAFKA_PORT}" >"${KAFKA_RUN}/address"
	echo "127.0.0.1:${KAFKA_SASL_PORT}" >"${KAFKA_RUN}/sasl-ssl.address"
	echo "127.0.0.1:${KAFKA_MTLS_PORT}" >"${KAFKA_RUN}/mtls.address"

	local deadline=$((SECONDS + KAFKA_START_TIMEOUT))
	# 1. the process is up and the listener accepts connections
	while :; do
		if [ -s "${KAFKA_RUN}/kafka.pid" ] && ! launched_alive "${KAFKA_RUN}/kafka.pid"; then
			kafka_fail "the broker exited during startup"
		fi
		if port_open "$KAFKA_PORT" && kafka_pid >/dev/null; then
			break
		fi
		[ "$SECONDS" -lt "$deadline" ] || kafka_fail "not listening on 127.0.0.1:${KAFKA_PORT} after ${KAFKA_START_TIMEOUT}s"
		sleep 0.5
	done
	# 2. it answers a metadata request with itself as a live broker
	local out=""
	while :; do
		if out="$(timeout 60 bash "$SCRIPT" kafka-class org.apache.kafka.tools.BrokerApiVersionsCommand \
			--bootstrap-server "127.0.0.1:${KAFKA_PORT}" 2>&1)" &&
			grep -q "127.0.0.1:${KAFKA_PORT} (id: 1 " <<<"$out"; then
			break
		fi
		launched_alive "${KAFKA_RUN}/kafka.pid" || kafka_fail "the broker exited during startup"
		[ "$SECONDS" -lt "$deadline" ] || {
			echo "$out" | tail -n 20 >&2
			kafka_fail "no answer to ApiVersions on 127.0.0.1:${KAFKA_PORT} after ${KAFKA_START_TIMEOUT}s"
		}
		sleep 1
	done
	# 3. the secured listeners answer too: SASL_SSL as admin over
	# SCRAM-SHA-512, and mTLS with the client certificate, at the same time.
	kafka_wait_secure "$deadline"
	info "kafka: ready in $((SECONDS - started))s at 127.0.0.1:${KAFKA_PORT}, SASL_SSL 127.0.0.1:${KAFKA_SASL_PORT}, mTLS 127.0.0.1:${KAFKA_MTLS_PORT} (pid $(kafka_pid))"
}

# kafka_wait_secure DEADLINE: wait until the SASL_SSL listener answers
# ApiVersions as admin (SCRAM-SHA-512, admin.properties) and the mTLS one with
# the client certificate (mtls.properties), checked in parallel.
kafka_wait_secure() {
	local deadline="$1" name port cfg out
	local -a pids=()
	for name in sasl-ssl mtls; do
		if [ "$name" = sasl-ssl ]; then
			port="$KAFKA_SASL_PORT" cfg="${SECURE_DIR}/admin.properties"
		else
			port="$KAFKA_MTLS_PORT" cfg="${SECURE_DIR}/mtls.properties"
		fi
		out="${KAFKA_RUN}/logs/check-${name}.log"
		(
			while :; do
				if timeout 60 bash "$SCRIPT" kafka-class org.apache.kafka.tools.BrokerApiVersionsCommand \
					--bootstrap-server "127.0.0.1:${port}" --command-config "$cfg" >"$out" 2>&1 &&
					grep -q "127.0.0.1:${port} (id: 1 " "$out"; then
					exit 0
				fi
				[ "$SECONDS" -lt "$deadline" ] || exit 1
				sleep 1
			done
		) 9>&- &
		pids+=($!)
	done
	local i=0 bad=""
	for name in sasl-ssl mtls; do
		wait "${pids[$i]}" || bad="${bad} ${name}"
		i=$((i + 1))
	done
	if [ -n "$bad" ]; then
		for name in $bad; do
			echo "---- ${KAFKA_RUN}/logs/check-${name}.log ----" >&2
			tail -n 20 "${KAFKA_RUN}/logs/check-${name}.log" >&2 || true
		done
		kafka_fail "no answer to ApiVersions on the secured listener(s)${bad} (SASL_SSL 127.0.0.1:${KAFKA_SASL_PORT}, mTLS 127.0.0.1:${KAFKA_MTLS_PORT})"
	fi
}

# stop_jvm NAME PIDFILE PID: SIGTERM, then after STOP_TIMEOUT SIGKILL to its
# process group (a JVM started with setsid leads its own), then the pid file.
stop_jvm() {
	local name="$1" pidfile="$2" pid="$3"
	info "${name}: stopping (pid ${pid})"
	kill -TERM "$pid" 2>/dev/null || true
	if ! wait_gone "$pid" "$STOP_TIMEOUT"; then
		warn "${name}: still running after ${STOP_TIMEOUT}s; killing it"
		kill -KILL -- "-${pid}" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
		wait_gone "$pid" 10 || die "${name}: pid ${pid} survived SIGKILL"
	fi
	rm -f "$pidfile"
	info "${name}: stopped"
}

kafka_stop() {
	local pid
	if ! pid="$(kafka_pid)"; then
		info "kafka: not running"
		rm -f "${KAFKA_RUN}/kafka.pid"
		return 0
	fi
	stop_jvm kafka "${KAFKA_RUN}/kafka.pid" "$pid"
}

kafka_status() {
	local pid
	if pid="$(kafka_pid)"; then
		info "kafka: running (pid ${pid}) at $(kafka_address), SASL_SSL $(kafka_sasl_address), mTLS $(kafka_mtls_address)"
	else
		info "kafka: not running"
		return 1
	fi
}

# ---------------------------------------------------------------------------
# Kafka clusters for the fault campaigns: NAME is "cluster" (three nodes) or
# "solo" (one), each node a combined broker+controller in its own process,
# with its own ports and log dir under run/kafka-NAME/<node>. They are apart
# from the default broker, which other tests keep using while a campaign
# kills, pauses and restarts these nodes.

# kc_size NAME, kc_base NAME: the cluster's node count and first port (node i
# listens on base+2(i-1), its controller on the port after).
kc_size() {
	case "$1" in
	cluster | net) echo 3 ;;
	solo) echo 1 ;;
	*) die "no Kafka cluster named '$1' (cluster, solo or net)" ;;
	esac
}

kc_base() {
	case "$1" in
	cluster) echo "${OXBOW_KAFKA_CLUSTER_PORT:-19092}" ;;
	solo) echo "${OXBOW_KAFKA_SOLO_PORT:-19192}" ;;
	net) echo 9092 ;;
	esac
}

kc_dir() { echo "${RUN_DIR}/kafka-$1/$2"; }

# kc_port NAME I: node I's port; in "net" every node has an address of its
# own and the same port.
kc_port() {
	if [ "$1" = net ]; then
		kc_base net
	else
		echo $(($(kc_base "$1") + 2 * ($2 - 1)))
	fi
}

# kc_host NAME I, kc_exec NAME I: node I's address, and the words that run a
# command where it runs ("ip netns exec NS" in "net", whose namespaces and
# addresses start kept in run/kafka-net/hosts).
kc_host() {
	if [ "$1" = net ]; then
		sed -n "${2}p" "${RUN_DIR}/kafka-net/hosts" | cut -d= -f2
	else
		echo 127.0.0.1
	fi
}

kc_exec() {
	if [ "$1" = net ]; then
		echo "ip netns exec $(sed -n "${2}p" "${RUN_DIR}/kafka-net/hosts" | cut -d= -f1)"
	fi
}

kc_address() {
	local name="$1" n i out=""
	n="$(kc_size "$name")"
	for i in $(seq 1 "$n"); do
		out="${out:+${out},}$(kc_host "$name" "$i"):$(kc_port "$name" "$i")"
	done
	echo "$out"
}

kc_pid() {
	local dir pid
	dir="$(kc_dir "$1" "$2")"
	pid="$(cat "${dir}/kafka.pid" 2>/dev/null)" || return 1
	proc_matches "$pid" kafka.Kafka "${dir}/server.properties" || return 1
	echo "$pid"
}

kc_write_config() {
	local name="$1" i="$2" n dir port host voters="" j rf isr
	n="$(kc_size "$name")"
	dir="$(kc_dir "$name" "$i")"
	port="$(kc_port "$name" "$i")"
	host="$(kc_host "$name" "$i")"
	for j in $(seq 1 "$n"); do
		voters="${voters:+${voters},}${j}@$(kc_host "$name" "$j"):$(($(kc_port "$name" "$j") + 1))"
	done
	rf="$n"
	isr=$((n > 1 ? 2 : 1))
	mkdir -p "${dir}/data" "${dir}/logs"
	cat >"${dir}/server.properties" <<EOF
# Written by scripts/services.sh: node ${i} of the ${n}-node KRaft cluster "${name}" for fault campaigns.
process.roles=broker,controller
node.id=${i}
controller.quorum.voters=${voters}
listeners=PLAINTEXT://${host}:${port},CONTROLLER://${host}:$((port + 1))
advertised.listeners=PLAINTEXT://${host}:${port}
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=${dir}/data

# Every topic (internal ones included) on every node, and a write needs
# ${isr} of them: a node may fail without losing an acknowledged record.
num.partitions=1
default.replication.factor=${rf}
min.insync.replicas=${isr}
offsets.topic.replication.factor=${rf}
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=${rf}
transaction.state.log.min.isr=${isr}
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=${rf}
share.coordinator.state.topic.min.isr=${isr}
unclean.leader.election.enable=false

$(kafka_test_settings)
EOF
	kafka_log4j "oxbow-kafka-${name}-${i}" "$dir"
}

kc_fail() {
	local name="$1" i="$2" dir
	shift 2
	dir="$(kc_dir "$name" "$i")"
	echo "services: error: kafka-${name} node ${i}: $*" >&2
	echo "---- last 30 lines of ${dir}/logs/server.log ----" >&2
	tail -n 30 "${dir}/logs/server.log" >&2 2>/dev/null || true
	tail -n 30 "${dir}/logs/kafka.out" >&2 2>/dev/null || true
	exit 1
}

# kc_node_launch NAME I: start node I on its (formatted) data; returns once
# the process runs.
kc_node_launch() {
	local name="$1" i="$2" dir
	dir="$(kc_dir "$name" "$i")"
	local -a jvm_opts where
	read -r -a where <<<"$(kc_exec "$name" "$i")"
	read -r -a jvm_opts <<<"${OXBOW_KAFKA_CLUSTER_HEAP:--Xms128m -Xmx384m}"
	jvm_opts+=(
		-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true
		-Dlog4j2.configurationFile="${dir}/log4j2.properties" -Dkafka.logs.dir="${dir}/logs"
	)
	rm -f "${dir}/kafka.pid"
	(
		cd "$dir"
		# shellcheck disable=SC2016 # $$, $0 and $@ are the inner shell's
		setsid bash -c 'echo $$ >"$0/kafka.pid"; exec "$@"' "$dir" \
			"${where[@]}" "$JAVA" "${jvm_opts[@]}" -cp "${KAFKA_LIBS}/*" kafka.Kafka "${dir}/server.properties" \
			</dev/null >>"${dir}/logs/kafka.out" 2>&1 9>&- &
	)
	local deadline=$((SECONDS + 30))
	until [ -s "${dir}/kafka.pid" ]; do
		[ "$SECONDS" -lt "$deadline" ] || kc_fail "$name" "$i" "no pid after 30s"
		sleep 0.1
	done
}

# kc_node_wait NAME I: wait until node I answers ApiVersions as itself.
kc_node_wait() {
	local name="$1" i="$2" port host out="" deadline=$((SECONDS + KAFKA_START_TIMEOUT))
	local -a where
	port="$(kc_port "$name" "$i")"
	host="$(kc_host "$name" "$i")"
	read -r -a where <<<"$(kc_exec "$name" "$i")"
	while :; do
		launched_alive "$(kc_dir "$name" "$i")/kafka.pid" || kc_fail "$name" "$i" "the broker exited during startup"
		# shellcheck disable=SC2016 # $0 and $1 are the inner shell's
		if "${where[@]}" bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$host" "$port" 2>/dev/null &&
			out="$("${where[@]}" timeout 60 bash "$SCRIPT" kafka-class org.apache.kafka.tools.BrokerApiVersionsCommand \
				--bootstrap-server "${host}:${port}" 2>&1)" && grep -q "${host}:${port} (id: ${i} " <<<"$out"; then
			return 0
		fi
		[ "$SECONDS" -lt "$deadline" ] || kc_fail "$name" "$i" "no answer on ${host}:${port} after ${KAFKA_START_TIMEOUT}s"
		sleep 0.5
	done
}

kc_start() {
	local name="$1" n i port dir started=$SECONDS
	n="$(kc_size "$name")"
	if kc_pid "$name" 1 >/dev/null; then
		info "kafka-${name}: already running at $(kc_address "$name")"
		return 0
	fi
	find_java
	kafka_fetch
	if [ "$name" = net ]; then
		[ -n "${OXBOW_KAFKA_NET_HOSTS:-}" ] || die "kafka-net: set OXBOW_KAFKA_NET_HOSTS=ns1=ip1,ns2=ip2,ns3=ip3"
		[ "$(tr ',' '\n' <<<"$OXBOW_KAFKA_NET_HOSTS" | grep -c '^[^=]\+=[0-9.]\+$')" = "$n" ] ||
			die "kafka-net: OXBOW_KAFKA_NET_HOSTS=${OXBOW_KAFKA_NET_HOSTS}: want ${n} ns=ip pairs"
	else
		for i in $(seq 1 "$n"); do
			port="$(kc_port "$name" "$i")"
			if port_open "$port" || port_open $((port + 1)); then
				die "kafka-${name}: port 127.0.0.1:${port} or the next is in use (set OXBOW_KAFKA_$(tr '[:lower:]' '[:upper:]' <<<"$name")_PORT)"
			fi
		done
	fi
	rm -rf "${RUN_DIR}/kafka-${name}"
	if [ "$name" = net ]; then
		mkdir -p "${RUN_DIR}/kafka-net"
		tr ',' '\n' <<<"$OXBOW_KAFKA_NET_HOSTS" >"${RUN_DIR}/kafka-net/hosts"
	fi
	local cluster_id="-"
	while [[ "$cluster_id" == -* ]]; do
		cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
	done
	for i in $(seq 1 "$n"); do
		kc_write_config "$name" "$i"
		dir="$(kc_dir "$name" "$i")"
		if ! kafka_class kafka.tools.StorageTool format -t "$cluster_id" \
			-c "${dir}/server.properties" >"${dir}/logs/format.log" 2>&1; then
			cat "${dir}/logs/format.log" >&2
			die "kafka-${name}: formatting node ${i} failed"
		fi
	done
	info "kafka-${name}: starting ${n} node(s) at $(kc_address "$name")"
	for i in $(seq 1 "$n"); do
		kc_node_launch "$name" "$i"
	done
	for i in $(seq 1 "$n"); do
		kc_node_wait "$name" "$i"
	done
	info "kafka-${name}: ready in $((SECONDS - started))s at $(kc_address "$name")"
}

kc_stop() {
	local name="$1" n i pid
	n="$(kc_size "$name")"
	if [ ! -d "${RUN_DIR}/kafka-${name}" ]; then
		info "kafka-${name}: not running"
		return 0
	fi
	for i in $(seq 1 "$n"); do
		if pid="$(kc_pid "$name" "$i")"; then
			kill -CONT "$pid" 2>/dev/null || true
			kill -KILL -- "-${pid}" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
			wait_gone "$pid" 10 || die "kafka-${name}: node ${i} (pid ${pid}) survived SIGKILL"
		fi
	done
	rm -rf "${RUN_DIR}/kafka-${name}"
	info "kafka-${name}: stopped"
}

kc_status() {
	local name="$1" n i rc=0 pid
	n="$(kc_size "$name")"
	for i in $(seq 1 "$n"); do
		if pid="$(kc_pid "$name" "$i")"; then
			info "kafka-${name}: node ${i} running (pid ${pid}) at $(kc_host "$name" "$i"):$(kc_port "$name" "$i")"
		else
			info "kafka-${name}: node ${i} not running"
			rc=1
		fi
	done
	return "$rc"
}

# kc_node NAME I ACTION: what a fault campaign does to one node.
kc_node() {
	local name="$1" i="$2" action="$3" pid n
	n="$(kc_size "$name")"
	[[ "$i" =~ ^[0-9]+$ ]] && [ "$i" -ge 1 ] && [ "$i" -le "$n" ] || die "kafka-${name} has nodes 1 to ${n}, not '${i}'"
	[ -f "$(kc_dir "$name" "$i")/server.properties" ] || die "kafka-${name} was not started ('$0 start kafka-${name}')"
	case "$action" in
	pid)
		kc_pid "$name" "$i" || die "kafka-${name}: node ${i} is not running"
		;;
	kill)
		pid="$(kc_pid "$name" "$i")" || die "kafka-${name}: node ${i} is not running"
		kill -KILL -- "-${pid}" 2>/dev/null || kill -KILL "$pid"
		wait_gone "$pid" 10 || die "kafka-${name}: node ${i} (pid ${pid}) survived SIGKILL"
		info "kafka-${name}: node ${i} killed"
		;;
	stop)
		pid="$(kc_pid "$name" "$i")" || die "kafka-${name}: node ${i} is not running"
		kill -TERM "$pid"
		wait_gone "$pid" "$STOP_TIMEOUT" || die "kafka-${name}: node ${i} did not stop in ${STOP_TIMEOUT}s"
		info "kafka-${name}: node ${i} stopped"
		;;
	pause | resume)
		pid="$(kc_pid "$name" "$i")" || die "kafka-${name}: node ${i} is not running"
		if [ "$action" = pause ]; then kill -STOP "$pid"; else kill -CONT "$pid"; fi
		info "kafka-${name}: node ${i} ${action}d"
		;;
	start)
		if pid="$(kc_pid "$name" "$i")"; then
			info "kafka-${name}: node ${i} already running (pid ${pid})"
			return 0
		fi
		find_java
		kc_node_launch "$name" "$i"
		kc_node_wait "$name" "$i"
		info "kafka-${name}: node ${i} started on its data"
		;;
	*) usage ;;
	esac
}

# ---------------------------------------------------------------------------
# PostgreSQL

pg_find_bin() {
	local d
	if [ -n "${OXBOW_PG_BIN:-}" ]; then
		PG_BIN="$OXBOW_PG_BIN"
		[ -x "${PG_BIN}/initdb" ] || die "postgres: no initdb in OXBOW_PG_BIN=${PG_BIN}"
		return 0
	fi
	# shellcheck disable=SC2012 # version dirs: plain names, sorted by version
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		if [ -x "${d}/initdb" ] && [ -x "${d}/pg_ctl" ] && [ -x "${d}/postgres" ] && [ -x "${d}/pg_isready" ]; then
			PG_BIN="$d"
			return 0
		fi
	done
	return 1
}

pg_install() {
	command -v apt-get >/dev/null 2>&1 || die "postgres: no PostgreSQL server under /usr/lib/postgresql and no apt-get to install one"
	[ "$(id -u)" = 0 ] || die "postgres: installing the server needs root (apt-get install postgresql)"
	info "postgres: installing Debian's postgresql package"
	export DEBIAN_FRONTEND=noninteractive
	# Keep the package from creating (and starting) its own 'main' cluster on
	# port 5432: this script runs its own.
	if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
		mkdir -p /etc/postgresql-common
		echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
	fi
	local -a apt_opts=(-y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
	if ! apt-get install "${apt_opts[@]}" postgresql >"${RUN_DIR}/apt.log" 2>&1; then
		info "postgres: install failed; running apt-get update and retrying"
		apt-get update -q >>"${RUN_DIR}/apt.log" 2>&1 || true
		apt-get install "${apt_opts[@]}" postgresql >>"${RUN_DIR}/apt.log" 2>&1 || {
			tail -n 30 "${RUN_DIR}/apt.log" >&2
			die "postgres: apt-get install postgresql failed (see ${RUN_DIR}/apt.log)"
		}
	fi
	# If a packaged cluster got started on our port anyway, stop it.
	if command -v pg_lsclusters >/dev/null 2>&1; then
		local ver name port status _
		while read -r ver name port status _; do
			if [ "$port" = "$PG_PORT" ] && [ "$status" = online ]; then
				warn "postgres: stopping the packaged cluster ${ver}/${name} that holds port ${PG_PORT}"
				pg_ctlcluster "$ver" "$name" stop || true
			fi
		done < <(pg_lsclusters -h 2>/dev/null || true)
	fi
	pg_find_bin || die "postgres: installed, but no server binaries under /usr/lib/postgresql/*/bin"
}

# PostGIS, for the CDC differential test's geometry columns (Debian's
# postgresql-<major>-postgis-3), installed when the server's version lacks it.
pg_ensure_postgis() {
	local major
	major="$(basename "$(dirname "$PG_BIN")")"
	if ! [[ "$major" =~ ^[0-9]+$ ]]; then
		warn "postgres: not a Debian server (${PG_BIN}): PostGIS is not installed by this script"
		return 0
	fi
	[ -e "/usr/share/postgresql/${major}/extension/postgis.control" ] && return 0
	command -v apt-get >/dev/null 2>&1 || die "postgres: PostGIS is missing for PostgreSQL ${major} and there is no apt-get to install it"
	[ "$(id -u)" = 0 ] || die "postgres: installing PostGIS needs root (apt-get install postgresql-${major}-postgis-3)"
	info "postgres: installing Debian's postgresql-${major}-postgis-3"
	export DEBIAN_FRONTEND=noninteractive
	local -a apt_opts=(-y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
	if ! apt-get install "${apt_opts[@]}" "postgresql-${major}-postgis-3" >>"${RUN_DIR}/apt.log" 2>&1; then
		apt-get update -q >>"${RUN_DIR}/apt.log" 2>&1 || true
		apt-get install "${apt_opts[@]}" "postgresql-${major}-postgis-3" >>"${RUN_DIR}/apt.log" 2>&1 || {
			tail -n 30 "${RUN_DIR}/apt.log" >&2
			die "postgres: apt-get install postgresql-${major}-postgis-3 failed (see ${RUN_DIR}/apt.log)"
		}
	fi
}

pg_run_dir() {
	if [ -s "$PG_RUN_POINTER" ]; then
		cat "$PG_RUN_POINTER"
	else
		echo "${RUN_DIR}/postgres"
	fi
}

# as_postgres CMD...: run CMD as the 'postgres' user (the server refuses root).
as_postgres() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

pg_pid() {
	local dir pid
	dir="$(pg_run_dir)"
	pid="$(head -n 1 "${dir}/data/postmaster.pid" 2>/dev/null)" || return 1
	proc_matches "$pid" postgres "${dir}/data" || return 1
	echo "$pid"
}

pg_port() {
	cat "$(pg_run_dir)/port" 2>/dev/null || echo "$PG_PORT"
}

pg_dsn() {
	echo "postgres://postgres@127.0.0.1:$(pg_port)/${PG_DB}?sslmode=disable"
}

pg_fail() {
	local dir
	dir="$(pg_run_dir)"
	echo "services: error: postgres: $*" >&2
	echo "---- last 50 lines of ${dir}/postgres.log ----" >&2
	tail -n 50 "${dir}/postgres.log" >&2 2>/dev/null || true
	pg_stop >/dev/null 2>&1 || true
	exit 1
}

pg_start() {
	local pid
	if pid="$(pg_pid)"; then
		info "postgres: already running (pid ${pid}) at $(pg_dsn)"
		return 0
	fi
	pg_find_bin || pg_install
	pg_ensure_postgis
	if [ "$(id -u)" = 0 ]; then
		id postgres >/dev/null 2>&1 || die "postgres: no 'postgres' user (is the postgresql package installed?)"
	fi
	if port_open "$PG_PORT"; then
		die "postgres: port 127.0.0.1:${PG_PORT} is already in use by another process (set OXBOW_PG_PORT)"
	fi

	local dir="${RUN_DIR}/postgres"
	rm -f "$PG_RUN_POINTER"
	rm -rf "$dir"
	mkdir -p "$dir"
	if [ "$(id -u)" = 0 ]; then
		chown postgres: "$dir"
		if ! as_postgres test -w "$dir"; then
			# An ancestor of the cache dir is closed to other users.
			rm -rf "$dir"
			dir="/tmp/oxbow-services-postgres-${PG_PORT}"
			warn "postgres: the 'postgres' user cannot reach ${RUN_DIR}; using ${dir}"
			rm -rf "$dir"
			mkdir -p "$dir"
			chown postgres: "$dir"
			echo "$dir" >"$PG_RUN_POINTER"
		fi
	fi
	echo "$PG_PORT" >"${dir}/port"

	local started=$SECONDS
	if ! (cd "$dir" && as_postgres "${PG_BIN}/initdb" -D "${dir}/data" -U postgres -A trust \
		-E UTF8 --locale=C --no-sync) >"${dir}/initdb.log" 2>&1; then
		cat "${dir}/initdb.log" >&2
		die "postgres: initdb failed"
	fi
	cat >>"${dir}/data/postgresql.conf" <<EOF

# ---- scripts/services.sh: a throwaway server for tests ----
listen_addresses = '127.0.0.1'
port = ${PG_PORT}
unix_socket_directories = ''
wal_level = logical
max_replication_slots = 10
max_wal_senders = 10
# Durability is not needed for a server that is recreated on every start.
fsync = off
synchronous_commit = off
full_page_writes = off
# TLS with a test-only certificate (SAN IP:127.0.0.1, DNS:localhost) signed
# by the CA in ${SECURE_DIR}; copies in the data dir, owned by the server.
ssl = on
ssl_cert_file = 'server.crt'
ssl_key_file = 'server.key'
EOF
	pg_install_cert "${dir}/data"
	cat >"${dir}/data/pg_hba.conf" <<EOF
# scripts/services.sh: ${PG_SECURE_USER} only over TLS with a password
# (scram-sha-256), never without TLS; everyone else: trust on loopback,
# replication connections included. The first line that matches wins.
# TYPE     DATABASE     USER           ADDRESS        METHOD
hostssl    all          ${PG_SECURE_USER}   127.0.0.1/32   scram-sha-256
hostssl    replication  ${PG_SECURE_USER}   127.0.0.1/32   scram-sha-256
hostssl    all          ${PG_SECURE_USER}   ::1/128        scram-sha-256
hostssl    replication  ${PG_SECURE_USER}   ::1/128        scram-sha-256
hostnossl  all          ${PG_SECURE_USER}   127.0.0.1/32   reject
hostnossl  replication  ${PG_SECURE_USER}   127.0.0.1/32   reject
hostnossl  all          ${PG_SECURE_USER}   ::1/128        reject
hostnossl  replication  ${PG_SECURE_USER}   ::1/128        reject
# TYPE  DATABASE     USER  ADDRESS        METHOD
local   all          all                  trust
local   replication  all                  trust
host    all          all   127.0.0.1/32   trust
host    replication  all   127.0.0.1/32   trust
host    all          all   ::1/128        trust
host    replication  all   ::1/128        trust
EOF

	info "postgres: starting $("${PG_BIN}/postgres" --version | awk '{print $3}') on 127.0.0.1:${PG_PORT} (data ${dir}/data)"
	if ! (cd "$dir" && as_postgres setsid "${PG_BIN}/pg_ctl" -D "${dir}/data" -l "${dir}/postgres.log" \
		-w -t "$PG_START_TIMEOUT" -s start) </dev/null >"${dir}/pg_ctl.log" 2>&1 9>&-; then
		cat "${dir}/pg_ctl.log" >&2
		pg_fail "pg_ctl start failed"
	fi
	local deadline=$((SECONDS + PG_START_TIMEOUT))
	until "${PG_BIN}/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres; do
		[ "$SECONDS" -lt "$deadline" ] || pg_fail "pg_isready got no answer after ${PG_START_TIMEOUT}s"
		sleep 0.3
	done
	"${PG_BIN}/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres \
		-c "CREATE DATABASE ${PG_DB}" || pg_fail "CREATE DATABASE ${PG_DB} failed"
	# The secured side's role, with a new password (stored as scram-sha-256,
	# PostgreSQL's default; the SQL goes on stdin, not on a command line).
	local password
	password="$(secure_random)"
	"${PG_BIN}/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres \
		<<<"SET password_encryption = 'scram-sha-256'; CREATE ROLE ${PG_SECURE_USER} LOGIN REPLICATION CREATEDB PASSWORD '${password}';" ||
		pg_fail "CREATE ROLE ${PG_SECURE_USER} failed"
	secure_write_secret "${SECURE_DIR}/${PG_SECURE_USER}.password" "$password"
	pg_check_secure
	info "postgres: ready in $((SECONDS - started))s at $(pg_dsn) and $(pg_secure_dsn) (pid $(pg_pid))"
}

# pg_install_cert DATADIR: a new server certificate signed by the CA (shared
# with Kafka) as DATADIR/server.crt and server.key, owned by the server's
# user, the key 0600 (PostgreSQL refuses a key others can read).
pg_install_cert() {
	local data="$1"
	secure_init
	secure_leaf postgres-server localhost server
	cp "${SECURE_DIR}/postgres-server.pem" "${data}/server.crt"
	cp "${SECURE_DIR}/postgres-server.key" "${data}/server.key"
	chmod 0644 "${data}/server.crt"
	chmod 0600 "${data}/server.key"
	if [ "$(id -u)" = 0 ]; then
		chown postgres: "${data}/server.crt" "${data}/server.key"
	fi
}

# pg_secure_dsn: the secured side's DSN, without the password (it is in
# SECURE_DIR/oxbow_secure.password).
pg_secure_dsn() {
	echo "postgres://${PG_SECURE_USER}@127.0.0.1:$(pg_port)/${PG_DB}?sslmode=verify-full&sslrootcert=${SECURE_DIR}/ca.pem"
}

# pg_check_secure: oxbow_secure gets in with TLS (verify-full against the CA)
# and its password, and is refused without TLS.
pg_check_secure() {
	local pwfile="${SECURE_DIR}/${PG_SECURE_USER}.password" conn out
	[ -s "$pwfile" ] || pg_fail "no ${pwfile}"
	conn="host=127.0.0.1 port=$(pg_port) user=${PG_SECURE_USER} dbname=${PG_DB} connect_timeout=10"
	if ! out="$(PGPASSWORD="$(cat "$pwfile")" "${PG_BIN}/psql" -X -q -At \
		"${conn} sslmode=verify-full sslrootcert=${SECURE_DIR}/ca.pem" \
		-c "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()" 2>&1)" || [ "$out" != t ]; then
		pg_fail "${PG_SECURE_USER} could not connect with sslmode=verify-full: ${out}"
	fi
	if out="$(PGPASSWORD="$(cat "$pwfile")" "${PG_BIN}/psql" -X -q -At "${conn} sslmode=disable" -c "SELECT 1" 2>&1)"; then
		pg_fail "${PG_SECURE_USER} got in without TLS (sslmode=disable)"
	fi
	grep -q 'no encryption' <<<"$out" || pg_fail "${PG_SECURE_USER} without TLS: not the refusal expected: ${out}"
}

pg_stop() {
	local pid dir
	dir="$(pg_run_dir)"
	if ! pid="$(pg_pid)"; then
		info "postgres: not running"
		return 0
	fi
	info "postgres: stopping (pid ${pid})"
	if [ -z "${PG_BIN:-}" ]; then
		pg_find_bin || true
	fi
	if [ -n "${PG_BIN:-}" ]; then
		(cd "$dir" && as_postgres "${PG_BIN}/pg_ctl" -D "${dir}/data" -m fast -w -t "$STOP_TIMEOUT" -s stop) \
			>/dev/null 2>&1 || true
	else
		kill -INT "$pid" 2>/dev/null || true # fast shutdown
		wait_gone "$pid" "$STOP_TIMEOUT" || true
	fi
	if ! wait_gone "$pid" 5; then
		warn "postgres: still running after ${STOP_TIMEOUT}s; killing it and its backends"
		local -a kids=()
		read -r -a kids <<<"$(cat "/proc/${pid}/task/"*/children 2>/dev/null | tr '\n' ' ')" || true
		kill -KILL "$pid" "${kids[@]}" 2>/dev/null || true
		wait_gone "$pid" 10 || die "postgres: pid ${pid} survived SIGKILL"
	fi
	info "postgres: stopped"
}

# pg_restart: a fast shutdown and a start of the same data directory (tests
# of what survives a database restart).
pg_restart() {
	local pid dir
	dir="$(pg_run_dir)"
	pid="$(pg_pid)" || die "postgres: not running; start it first"
	pg_find_bin || die "postgres: no server binaries"
	# The data dir keeps its certificate, settings and role. Should the secure
	# dir have been removed since (a new CA), make a certificate from the new
	# CA before the restart and a new password after it.
	if ! { [ -s "${SECURE_DIR}/ca.pem" ] &&
		openssl verify -CAfile "${SECURE_DIR}/ca.pem" "${dir}/data/server.crt" >/dev/null 2>&1; }; then
		warn "postgres: the server's certificate is not from the CA in ${SECURE_DIR}; making a new one"
		pg_install_cert "${dir}/data"
	fi
	info "postgres: restarting (pid ${pid})"
	if ! (cd "$dir" && as_postgres setsid "${PG_BIN}/pg_ctl" -D "${dir}/data" -l "${dir}/postgres.log" -m fast \
		-w -t "$PG_START_TIMEOUT" -s restart) </dev/null >"${dir}/pg_ctl.log" 2>&1 9>&-; then
		cat "${dir}/pg_ctl.log" >&2
		pg_fail "pg_ctl restart failed"
	fi
	local deadline=$((SECONDS + PG_START_TIMEOUT))
	until "${PG_BIN}/pg_isready" -q -h 127.0.0.1 -p "$(pg_port)" -U postgres -d postgres; do
		[ "$SECONDS" -lt "$deadline" ] || pg_fail "pg_isready got no answer after ${PG_START_TIMEOUT}s"
		sleep 0.3
	done
	if [ ! -s "${SECURE_DIR}/${PG_SECURE_USER}.password" ]; then
		local password
		password="$(secure_random)"
		"${PG_BIN}/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(pg_port)" -U postgres -d postgres \
			<<<"SET password_encryption = 'scram-sha-256'; ALTER ROLE ${PG_SECURE_USER} PASSWORD '${password}';" ||
			pg_fail "ALTER ROLE ${PG_SECURE_USER} failed"
		secure_write_secret "${SECURE_DIR}/${PG_SECURE_USER}.password" "$password"
	fi
	pg_check_secure
	info "postgres: restarted (pid $(pg_pid))"
}

pg_status() {
	local pid
	if pid="$(pg_pid)"; then
		info "postgres: running (pid ${pid}) at $(pg_dsn)"
	else
		info "postgres: not running"
		return 1
	fi
}

# ---------------------------------------------------------------------------
# The schema registry: Apicurio Registry 2.4.2.Final, a Quarkus application
# built here once from Maven Central (scripts/registry/pom.xml), serving
# Confluent's Schema Registry API at /apis/ccompat/v7, in memory (H2): every
# start is empty. Where it differs from Confluent's (the default
# compatibility, NONE there, is set to BACKWARD at start) see
# engine/serde/registry's package doc.

# registry_app_properties JAR: the application.properties in the app's jar
# (Python's zipfile: unzip may not be installed).
registry_app_properties() {
	python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("application.properties"))' "$1"
}

registry_build() {
	local app="${REGISTRY_HOME}/target/quarkus-app/quarkus-run.jar"
	if [ -f "${REGISTRY_HOME}/.complete" ] && [ -f "$app" ]; then
		return 0
	fi
	command -v mvn >/dev/null 2>&1 || die "mvn not found: Maven is needed to build the schema registry from Maven Central"
	info "registry: building Apicurio Registry ${REGISTRY_VERSION} from Maven Central (once; a few minutes)"
	rm -rf "$REGISTRY_HOME"
	mkdir -p "${REGISTRY_HOME}/src/main/resources"
	cp "${REPO_DIR}/scripts/registry/pom.xml" "${REGISTRY_HOME}/pom.xml"
	local mlog="${REGISTRY_HOME}/mvn.log" m2="${CACHE_DIR}/m2" attempt ok=0
	local jar="${m2}/io/apicurio/apicurio-registry-app/${REGISTRY_VERSION}/apicurio-registry-app-${REGISTRY_VERSION}.jar"
	for attempt in 1 2 3; do
		# First the app's jar, whose application.properties the build needs.
		if (cd "$REGISTRY_HOME" && mvn -B -q -Dmaven.repo.local="$m2" -Dstyle.color=never \
			-Dmaven.wagon.http.retryHandler.count=3 dependency:resolve) >"$mlog" 2>&1 &&
			[ -f "$jar" ] &&
			{ registry_app_properties "$jar" && echo && cat "${REPO_DIR}/scripts/registry/application.properties"; } \
				>"${REGISTRY_HOME}/src/main/resources/application.properties" &&
			(cd "$REGISTRY_HOME" && mvn -B -q -Dmaven.repo.local="$m2" -Dstyle.color=never \
				-Dmaven.wagon.http.retryHandler.count=3 -DskipTests package) >>"$mlog" 2>&1 &&
			[ -f "$app" ]; then
			ok=1
			break
		fi
		warn "registry: the build failed (attempt ${attempt}/3); last lines of ${mlog}:"
		tail -n 20 "$mlog" >&2 || true
		sleep $((attempt * 3))
	done
	[ "$ok" = 1 ] || die "registry: could not build Apicurio Registry ${REGISTRY_VERSION} (see ${mlog})"
	touch "${REGISTRY_HOME}/.complete"
	info "registry: built ${app}"
}

registry_pid() {
	local pid
	pid="$(cat "${REGISTRY_RUN}/registry.pid" 2>/dev/null)" || return 1
	proc_matches "$pid" quarkus-run.jar "-Dquarkus.http.port=${REGISTRY_PORT}" || return 1
	echo "$pid"
}

registry_url() { echo "http://127.0.0.1:${REGISTRY_PORT}/apis/ccompat/v7"; }

registry_fail() {
	echo "services: error: registry: $*" >&2
	echo "---- last 50 lines of ${REGISTRY_RUN}/registry.out ----" >&2
	tail -n 50 "${REGISTRY_RUN}/registry.out" >&2 2>/dev/null || true
	registry_stop >/dev/null 2>&1 || true
	exit 1
}

registry_start() {
	local pid
	if pid="$(registry_pid)"; then
		info "registry: already running (pid ${pid}) at $(registry_url)"
		return 0
	fi
	find_java
	command -v curl >/dev/null 2>&1 || die "curl not found: the registry's start checks its API with it"
	registry_build
	if port_open "$REGISTRY_PORT"; then
		die "registry: port 127.0.0.1:${REGISTRY_PORT} is already in use by another process (set OXBOW_REGISTRY_PORT)"
	fi
	local started=$SECONDS
	rm -rf "$REGISTRY_RUN"
	mkdir -p "$REGISTRY_RUN"
	info "registry: starting Apicurio Registry ${REGISTRY_VERSION} on 127.0.0.1:${REGISTRY_PORT}"
	local -a jvm_opts
	read -r -a jvm_opts <<<"$REGISTRY_HEAP"
	jvm_opts+=(-XX:+UseSerialGC -Djava.awt.headless=true "-Dquarkus.http.port=${REGISTRY_PORT}" -Dquarkus.http.host=127.0.0.1)
	(
		cd "$REGISTRY_RUN"
		# shellcheck disable=SC2016 # $$, $0 and $@ are the inner shell's
		setsid bash -c 'echo $$ >"$0/registry.pid"; exec "$@"' "$REGISTRY_RUN" \
			"$JAVA" "${jvm_opts[@]}" -jar "${REGISTRY_HOME}/target/quarkus-app/quarkus-run.jar" \
			</dev/null >"${REGISTRY_RUN}/registry.out" 2>&1 9>&- &
	)
	local deadline=$((SECONDS + REGISTRY_START_TIMEOUT)) url
	url="$(registry_url)"
	while ! curl -fsS -o /dev/null "${url}/subjects" 2>/dev/null; do
		if [ -s "${REGISTRY_RUN}/registry.pid" ] && ! launched_alive "${REGISTRY_RUN}/registry.pid"; then
			registry_fail "it exited during startup"
		fi
		[ "$SECONDS" -lt "$deadline" ] || registry_fail "no answer at ${url}/subjects after ${REGISTRY_START_TIMEOUT}s"
		sleep 0.5
	done
	# Confluent's default compatibility, which users port from.
	curl -fsS -o /dev/null -X PUT -H 'Content-Type: application/json' \
		--data '{"compatibility":"BACKWARD"}' "${url}/config" ||
		registry_fail "setting the global compatibility to BACKWARD failed"
	info "registry: ready in $((SECONDS - started))s at ${url} (pid $(registry_pid))"
}

registry_stop() {
	local pid
	if ! pid="$(registry_pid)"; then
		info "registry: not running"
		rm -f "${REGISTRY_RUN}/registry.pid"
		return 0
	fi
	stop_jvm registry "${REGISTRY_RUN}/registry.pid" "$pid"
}

registry_status() {
	local pid
	if pid="$(registry_pid)"; then
		info "registry: running (pid ${pid}) at $(registry_url)"
	else
		info "registry: not running"
		return 1
	fi
}

# ---------------------------------------------------------------------------

usage() {
	# The header comment, up to the first line of code.
	awk 'NR > 1 && !/^#/ { exit } NR > 1' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

targets() {
	local t
	[ $# -gt 0 ] || set -- all
	for t in "$@"; do
		case "$t" in
		all) echo "kafka postgres registry" ;;
		kafka | postgres | registry | kafka-cluster | kafka-solo | kafka-net) echo "$t" ;;
		*) usage ;;
		esac
	done
}

main() {
	[ $# -ge 1 ] || usage
	local cmd="$1" t rc=0
	shift
	case "$cmd" in
	start)
		with_lock
		for t in $(targets "$@"); do
			case "$t" in
			kafka) kafka_start ;;
			postgres) pg_start ;;
			registry) registry_start ;;
			kafka-cluster | kafka-solo | kafka-net) kc_start "${t#kafka-}" ;;
			esac
		done
		;;
	stop)
		with_lock
		# Stop in reverse order; try every one even if one fails. "all"
		# includes the fault campaigns' clusters.
		local ts
		ts="$(targets "$@" | tr '\n' ' ')"
		[ "${1:-all}" = all ] && ts="kafka-net kafka-solo kafka-cluster ${ts}"
		for t in $(echo "$ts" | tr ' ' '\n' | tac); do
			case "$t" in
			kafka) kafka_stop || rc=1 ;;
			postgres) pg_stop || rc=1 ;;
			registry) registry_stop || rc=1 ;;
			kafka-cluster | kafka-solo | kafka-net) kc_stop "${t#kafka-}" || rc=1 ;;
			esac
		done
		return "$rc"
		;;
	restart)
		[ "${1:-}" = postgres ] || usage
		with_lock
		pg_restart
		;;
	status)
		for t in $(targets "$@"); do
			case "$t" in
			kafka) kafka_status || rc=1 ;;
			postgres) pg_status || rc=1 ;;
			registry) registry_status || rc=1 ;;
			kafka-cluster | kafka-solo | kafka-net) kc_status "${t#kafka-}" || rc=1 ;;
			esac
		done
		return "$rc"
		;;
	env)
		local secure=0
		if kafka_pid >/dev/null; then
			echo "export KAFKA_BROKERS=$(kafka_address)"
			echo "export OXBOW_KAFKA_SASL_SSL=$(kafka_sasl_address)"
			echo "export OXBOW_KAFKA_MTLS=$(kafka_mtls_address)"
			secure=1
		fi
		if pg_pid >/dev/null; then
			echo "export OXBOW_PG_DSN='$(pg_dsn)'"
			echo "export OXBOW_PG_SECURE_DSN='$(pg_secure_dsn)'"
			secure=1
		fi
		if [ "$secure" = 1 ]; then
			echo "export OXBOW_SECURE_DIR=${SECURE_DIR}"
		fi
		if registry_pid >/dev/null; then
			echo "export OXBOW_REGISTRY_URL=$(registry_url)"
		fi
		if kc_pid cluster 1 >/dev/null; then
			echo "export OXBOW_KAFKA_CLUSTER=$(kc_address cluster)"
		fi
		if kc_pid solo 1 >/dev/null; then
			echo "export OXBOW_KAFKA_SOLO=$(kc_address solo)"
		fi
		;;
	node)
		[ $# -eq 3 ] || usage
		case "$1" in
		kafka-cluster | kafka-solo | kafka-net) kc_node "${1#kafka-}" "$2" "$3" ;;
		*) usage ;;
		esac
		;;
	kafka-class)
		[ $# -ge 1 ] || usage
		kafka_class "$@"
		;;
	fetch)
		# Only Kafka has something to fetch (its jars, into .cache/kafka/<version>/libs).
		if [ $# -gt 1 ] || [ "${1:-kafka}" != kafka ]; then usage; fi
		with_lock
		kafka_fetch
		info "kafka: ${KAFKA_VERSION} jars in ${KAFKA_LIBS}"
		;;
	-h | --help | help) usage ;;
	*) usage ;;
	esac
}

main "$@"
