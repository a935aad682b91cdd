#!/usr/bin/env bash
# Checks the HTTP contract of both examples with tools that did not write
# it: each runs on its embedded broker, its /openapi.json is checked by
# openapi-spec-validator, and schemathesis sends it generated requests
# (bounded: a number of examples per operation and a time limit), failing
# on any 5xx, a response that breaks the document's schema or status
# codes, or a wrong content type. The tools come from PyPI into a
# virtualenv under .cache/ (OXBOW_CACHE_DIR overrides).
#
# The shoe store is checked twice: open, and requiring a token (-token),
# with and without it.
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

# get URL [TOKEN]: the body of a 200 answer on stdout, else a failure
# (python3, not curl: the virtualenv needs it anyway); with a bearer token
# if given.
get() {
	python3 -c 'import sys, urllib.request
req = urllib.request.Request(sys.argv[1])
if len(sys.argv) > 2 and sys.argv[2]:
    req.add_header("Authorization", "Bearer " + sys.argv[2])
sys.stdout.write(urllib.request.urlopen(req, timeout=5).read().decode())' "$1" "${2:-}" 2>/dev/null
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

# check NAME PORT [TOKEN]: starts the example on the embedded broker,
# validates its document and runs schemathesis against it, then stops it.
# With a token the example requires it: schemathesis runs with it, and
# again without it (every answer then a 401 the document describes).
check() {
	local name=$1 port=$2 token=${3:-} url="http://127.0.0.1:$2"
	env -u KAFKA_BROKERS -u OXBOW_PG_DSN "$work/$name" -addr "127.0.0.1:$port" -token "$token" >"$work/$name.log" 2>&1 &
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
	get "$url/openapi.json" "$token" >"$work/$name-openapi.json"
	"$venv/bin/openapi-spec-validator" "$work/$name-openapi.json"
	local -a auths=(none)
	[ -z "$token" ] || auths=(token none)
	for auth in "${auths[@]}"; do
		local -a header=()
		local sends="no credentials"
		if [ "$auth" = token ]; then
			header=(-H "Authorization: Bearer $token")
			sends="the token"
		fi
		echo "contract: $name (a token required: $([ -n "$token" ] && echo yes || echo no)), schemathesis sending $sends"
		# Change feeds stream until the client goes: not for a
		# request-response fuzzer.
		(cd "$work" && timeout 600 "$venv/bin/schemathesis" run "$work/$name-openapi.json" --url "$url" "${header[@]}" \
			--checks not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance \
			--exclude-path-regex '/changes$' -n "$examples" --request-timeout 15 --generation-deterministic --no-color)
	done
	kill "$pid"
	wait "$pid" 2>/dev/null || true
}

check shoestore 18480
check shoestore 18482 "contract-$RANDOM$RANDOM"
check stockavg 18481
echo "contract: both examples' documents are valid and their servers keep them"
