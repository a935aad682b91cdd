#!/usr/bin/env bash
# Runs examples/shoestore/compose.yaml as a user would try it — the store,
# Kafka and PostgreSQL from the local images — and checks that it works:
# the store serves, takes commands, its views reach the sold shoe, and a
# price changed in PostgreSQL reaches its catalog view. Then takes it down.
#
#   scripts/compose-smoke.sh
#
# Needs a Docker engine (scripts/images.sh engine start), docker-compose
# (Debian's package) and the images (it builds what is missing). It uses
# ports apart from scripts/services.sh's (SHOESTORE_* override them), and
# ends in at most a few minutes.
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_DIR"
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

export SHOESTORE_HTTP_PORT="${SHOESTORE_HTTP_PORT:-28080}"
export SHOESTORE_KAFKA_PORT="${SHOESTORE_KAFKA_PORT:-29192}"
export SHOESTORE_KAFKA_CONTROLLER_PORT="${SHOESTORE_KAFKA_CONTROLLER_PORT:-$((SHOESTORE_KAFKA_PORT + 1))}"
export SHOESTORE_PG_PORT="${SHOESTORE_PG_PORT:-25432}"
TIMEOUT="${OXBOW_COMPOSE_TIMEOUT:-180}"
PROJECT=oxbow-compose-smoke
URL="http://127.0.0.1:${SHOESTORE_HTTP_PORT}"

info() { echo "compose-smoke: $*"; }
die() {
	echo "compose-smoke: error: $*" >&2
	exit 1
}

command -v docker-compose >/dev/null 2>&1 || die "docker-compose not found: apt-get install docker-compose"
command -v curl >/dev/null 2>&1 || die "curl not found"
compose() { docker-compose -p "$PROJECT" -f examples/shoestore/compose.yaml "$@"; }

for port in "$SHOESTORE_HTTP_PORT" "$SHOESTORE_KAFKA_PORT" "$SHOESTORE_KAFKA_CONTROLLER_PORT" "$SHOESTORE_PG_PORT"; do
	if port_open "$port"; then
		die "port ${port} is taken (set SHOESTORE_HTTP_PORT, SHOESTORE_KAFKA_PORT, SHOESTORE_PG_PORT)"
	fi
done

scripts/images.sh build all >/dev/null
scripts/images.sh build shoestore >/dev/null

ok=0
down() {
	if [ "$ok" != 1 ]; then
		echo "compose-smoke: the services' last log lines:" >&2
		compose logs --no-color --tail=40 >&2 || true
	fi
	compose down -v --remove-orphans >/dev/null 2>&1 || true
}
trap down EXIT

started=$SECONDS
compose up -d
deadline=$((SECONDS + TIMEOUT))

# await PATH SUBSTRING: poll GET PATH until its body contains SUBSTRING.
await() {
	local body=""
	while [ "$SECONDS" -lt "$deadline" ]; do
		if body="$(curl -fsS --max-time 5 "${URL}$1" 2>/dev/null)" && [[ "$body" == *"$2"* ]]; then
			echo "$body"
			return 0
		fi
		sleep 0.5
	done
	die "GET $1 did not show ${2} within ${TIMEOUT}s (last: ${body:-no answer})"
}

# send SHOE JSON: post a command; it must be accepted.
send() {
	local out
	out="$(curl -sS --max-time 30 -w '\n%{http_code}' -H 'Content-Type: application/json' \
		"${URL}/aggregates/inventory/$1/commands" -d "$2")"
	[ "${out##*$'\n'}" = 200 ] || die "command to $1 ($2): HTTP ${out##*$'\n'}: ${out%$'\n'*}"
}

# The API answers as soon as the store runs; the catalog, captured from
# PostgreSQL, follows.
await /views/catalog/keys/red 'Red Oxford' >/dev/null
info "the store serves at ${URL}, its catalog from PostgreSQL, $((SECONDS - started))s after compose up"
send red '{"type":"ReceiveShipment","data":{"quantity":2,"unitCost":3000}}'
send red '{"type":"SellPair","data":{}}'
await /views/inventory/keys/red '"inStock":1,"sold":1' >/dev/null
await /views/till/keys/till '"sales":1' >/dev/null
info "a shipment and a sale reached the inventory and the till"

compose exec -T -e PGPASSWORD=shoestore postgres \
	psql -q -h 127.0.0.1 -p "$SHOESTORE_PG_PORT" -U postgres shoestore \
	-c "UPDATE catalog SET price_cents = 9100 WHERE model = 'green'" >/dev/null
await /views/catalog/keys/green '"price_cents":9100' >/dev/null
info "a price changed in PostgreSQL reached the catalog view"
ok=1
info "passed in $((SECONDS - started))s"
