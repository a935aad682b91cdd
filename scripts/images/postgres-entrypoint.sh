#!/bin/bash
# Entrypoint of the oxbow/postgres image that scripts/images.sh builds:
# PostgreSQL from Debian's packages with logical replication, for tests, run
# with `docker run --network host`.
#
# On the first start it initialises PGDATA (/var/lib/postgresql/data; initdb
# as the postgres user, UTF8) and creates POSTGRES_DB. No temporary server is
# started for that (the database is created in single-user mode), so the
# line "database system is ready to accept connections" appears once per
# start of the container, from the real server. Then it execs the server as
# the postgres user, in the foreground, logging to stderr. A later start of
# the same container (docker stop; docker start) finds the data and skips the
# init.
#
#   POSTGRES_USER      postgres    the superuser initdb creates
#   POSTGRES_PASSWORD  (unset)     set: scram-sha-256 password auth on host
#                                  connections (from any address); unset:
#                                  trust, loopback only
#   POSTGRES_DB        $POSTGRES_USER   created at init
#   POSTGRES_INITDB_ARGS           more initdb arguments (word-split)
#   PGPORT             5432        port
#   OXBOW_PG_LISTEN    127.0.0.1   listen_addresses
#
# The user, password and database apply at init only, as in the official
# postgres image. Settings: wal_level=logical (always: it comes last on the
# command line), max_replication_slots=10, max_wal_senders=10, replication
# connections allowed in pg_hba.conf. Arguments starting with '-' go to
# postgres (`docker run ... oxbow/postgres:15 -c fsync=off`); so do the ones
# after a first argument "postgres"; any other command is run as is.
set -euo pipefail

PG_MAJOR="${PG_MAJOR:-15}"
PG_BIN="/usr/lib/postgresql/${PG_MAJOR}/bin"
PGDATA="${PGDATA:-/var/lib/postgresql/data}"
export PGDATA

log() { echo "postgres-entrypoint: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

if [ $# -gt 0 ] && [ "$1" = postgres ]; then
	shift
elif [ $# -gt 0 ] && [[ "$1" != -* ]]; then
	exec "$@"
fi

user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
port="${PGPORT:-5432}"
listen="${OXBOW_PG_LISTEN:-127.0.0.1}"
[[ "$port" =~ ^[0-9]+$ ]] || die "PGPORT is not a port number: '${port}'"

# as_postgres CMD...: run CMD as the postgres user (the server refuses root).
as_postgres() {
	if [ "$(id -u)" = 0 ]; then
		HOME=/var/lib/postgresql setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
	else
		"$@"
	fi
}

if [ "$(id -u)" = 0 ]; then
	mkdir -p "$PGDATA"
	chown postgres:postgres "$PGDATA"
	chmod 700 "$PGDATA"
	# The server's Unix socket directory (Debian's default).
	install -d -o postgres -g postgres -m 2775 /var/run/postgresql
fi

if [ ! -s "${PGDATA}/PG_VERSION" ]; then
	log "initialising ${PGDATA} (user ${user}, database ${db})"
	declare -a initdb_args=(-D "$PGDATA" -U "$user" -E UTF8 --locale=C.UTF-8 -A trust --no-sync)
	pwfile=""
	if [ -n "${POSTGRES_PASSWORD:-}" ]; then
		pwfile="$(mktemp)"
		printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
		[ "$(id -u)" != 0 ] || chown postgres "$pwfile"
		initdb_args+=(--pwfile="$pwfile")
	fi
	if [ -n "${POSTGRES_INITDB_ARGS:-}" ]; then
		read -r -a more <<<"$POSTGRES_INITDB_ARGS"
		initdb_args+=("${more[@]}")
	fi
	(cd /var/lib/postgresql 2>/dev/null || cd /; as_postgres "${PG_BIN}/initdb" "${initdb_args[@]}") ||
		die "initdb failed"
	[ -z "$pwfile" ] || rm -f "$pwfile"

	cat >>"${PGDATA}/postgresql.conf" <<EOF

# ---- oxbow/postgres image (scripts/images/postgres-entrypoint.sh) ----
# listen_addresses and port come from the command line (OXBOW_PG_LISTEN, PGPORT).
wal_level = logical
max_replication_slots = 10
max_wal_senders = 10
EOF

	if [ -n "${POSTGRES_PASSWORD:-}" ]; then
		method=scram-sha-256
	else
		method=trust
	fi
	{
		echo "# oxbow/postgres image: ${method} on host connections, replication included."
		echo "# TYPE  DATABASE     USER  ADDRESS        METHOD"
		echo "local   all          all                  trust"
		echo "local   replication  all                  trust"
		echo "host    all          all   127.0.0.1/32   ${method}"
		echo "host    replication  all   127.0.0.1/32   ${method}"
		echo "host    all          all   ::1/128        ${method}"
		echo "host    replication  all   ::1/128        ${method}"
		if [ -n "${POSTGRES_PASSWORD:-}" ]; then
			echo "host    all          all   all            ${method}"
			echo "host    replication  all   all            ${method}"
		fi
	} >"${PGDATA}/pg_hba.conf"

	if [ "$db" != postgres ]; then
		# Single-user mode: no postmaster, no "ready to accept connections".
		out="$(as_postgres "${PG_BIN}/postgres" --single -D "$PGDATA" -c listen_addresses= postgres \
			<<<"CREATE DATABASE \"${db//\"/\"\"}\"" 2>&1)" || {
			echo "$out" >&2
			die "CREATE DATABASE ${db} failed"
		}
		if grep -q 'ERROR:' <<<"$out"; then
			echo "$out" >&2
			die "CREATE DATABASE ${db} failed"
		fi
	fi
	log "initialised"
fi

log "starting PostgreSQL ${PG_MAJOR} on ${listen}:${port}"
if [ "$(id -u)" = 0 ]; then
	export HOME=/var/lib/postgresql
	exec setpriv --reuid=postgres --regid=postgres --init-groups -- \
		"${PG_BIN}/postgres" -D "$PGDATA" -c listen_addresses="$listen" -c port="$port" "$@" -c wal_level=logical
fi
exec "${PG_BIN}/postgres" -D "$PGDATA" -c listen_addresses="$listen" -c port="$port" "$@" -c wal_level=logical
