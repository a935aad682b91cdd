#!/usr/bin/env bash
# Checks the HTTP contract of both examples with tools that did not write
# it: each runs on its embedded broker, its /openapi.json is checked by
# openapi-spec-validator, and schemathesis sends it generated requests
# (bounded: a number of examples per operation and a time limit), failing
# on any 5xx, a response that breaks the document's schema or status
# codes, or a wrong content type. The tools come from PyPI into a
# virtualenv under .cache/ (OXBOW_CACHE_DIR overrides).
#
#   scripts/contract.sh            # both examples
#   CONTRACT_EXAMPLES=25 scripts/contract.sh   # more examples per operation
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${OXBOW_CACHE_DIR:-$root/.cache}
venv=$cache/venv
examples=${CONTRACT_EXAMPLES:-20}

if [ ! -x "$venv/bin/schemathesis" ] || [ ! -x "$venv/bin/openapi-spec-validator" ]; then
	echo "contract: installing openapi-spec-validator and schemathesis into $venv"
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q --disable-pip-version-check openapi-spec-validator schemathesis
fi

# get URL: the body of a 200 answer on stdout, else a failure (python3, not
# curl: the virtualenv needs it anyway).
get() {
	python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1" 2>/dev/null
}

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

(cd "$root" && go build -o "$work/shoestore" ./examples/shoestore && go build -o "$work/stockavg" ./examples/stockavg)

# check NAME PORT: starts the example on the embedded broker, validates its
# document and runs schemathesis against it, then stops it.
check() {
	local name=$1 port=$2 url="http://127.0.0.1:$2"
	env -u KAFKA_BROKERS -u OXBOW_PG_DSN "$work/$name" -addr "127.0.0.1:$port" >"$work/$name.log" 2>&1 &
	local pid=$!
	pids+=("$pid")
	for _ in $(seq 180); do
		if get "$url/readyz" >/dev/null; then break; fi
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "contract: $name stopped:" >&2
			cat "$work/$name.log" >&2
			exit 1
		fi
		sleep 1
	done
	get "$url/readyz" >/dev/null || { echo "contract: $name is not ready after 3 minutes" >&2; cat "$work/$name.log" >&2; exit 1; }
	get "$url/openapi.json" >"$work/$name-openapi.json"
	"$venv/bin/openapi-spec-validator" "$work/$name-openapi.json"
	# Change feeds stream until the client goes: not for a request-response
	# fuzzer.
	timeout 600 "$venv/bin/schemathesis" run "$url/openapi.json" \
		--checks not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance \
		--exclude-path-regex '/changes$' -n "$examples" --request-timeout 15 --generation-deterministic --no-color
	kill "$pid"
	wait "$pid" 2>/dev/null || true
}

check shoestore 18480
check stockavg 18481
echo "contract: both examples' documents are valid and their servers keep them"
