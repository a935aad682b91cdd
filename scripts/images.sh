#!/usr/bin/env bash
# Builds, once per machine, the two local Docker images the tests run: a
# single-node Apache Kafka (KRaft) and a PostgreSQL with logical replication,
# from Debian's packages (debootstrap) and Maven Central's jars only. Nothing
# is pulled from a registry: the root file system comes from debootstrap and
# each image is made with `docker import`.
#
#   scripts/images.sh build [kafka|postgres|all]   # build what is missing or stale; prints the names
#   scripts/images.sh build shoestore              # the example store, for examples/shoestore/compose.yaml
#   scripts/images.sh status                       # exit 1 unless both are built from the current recipe
#   scripts/images.sh names                        # the two image names, one a line
#   scripts/images.sh engine start|stop|status     # a Docker engine of our own, if none answers
#
# The images are labelled dev.oxbow.recipe=<hash of this script, the
# entrypoints under scripts/images/, the versions and the base>; build
# rebuilds one whose label differs. Their contracts (environment, log lines)
# are in scripts/images/*-entrypoint.sh and scripts/README.md.
#
# Everything it downloads or creates lives under .cache/ in the repository
# (OXBOW_CACHE_DIR overrides): the debootstrapped base as a tarball under
# .cache/images/, Kafka's jars under .cache/kafka/ (scripts/services.sh fetch).
set -euo pipefail

SCRIPT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
REPO_DIR="$(dirname "$(dirname "$SCRIPT")")"
CACHE_DIR="${OXBOW_CACHE_DIR:-${REPO_DIR}/.cache}"
RUN_DIR="${CACHE_DIR}/run"
IMAGES_DIR="${CACHE_DIR}/images"
ENTRY_DIR="${REPO_DIR}/scripts/images"

KAFKA_VERSION="${OXBOW_KAFKA_VERSION:-4.4.0}"
KAFKA_IMAGE="oxbow/kafka:${KAFKA_VERSION}"
KAFKA_LIBS="${CACHE_DIR}/kafka/${KAFKA_VERSION}/libs"
PG_MAJOR=15
PG_IMAGE="oxbow/postgres:${PG_MAJOR}"
SHOESTORE_IMAGE="oxbow/shoestore:dev"

# The base both images share: one debootstrap, cached as a tarball named by a
# hash of what goes into it. Bump BASE_REVISION when base_trim changes.
SUITE=bookworm
BASE_PACKAGES=(openjdk-17-jre-headless "postgresql-${PG_MAJOR}" ca-certificates)
BASE_REVISION=1

RECIPE_LABEL=dev.oxbow.recipe
ENGINE_TIMEOUT="${OXBOW_DOCKERD_TIMEOUT:-60}"
ENGINE_PID="${RUN_DIR}/dockerd.pid"
ENGINE_LOG="${RUN_DIR}/dockerd.log"

# Progress goes to stderr, so that `build` and `names` print only the names.
info() { echo "images: $*" >&2; }
warn() { echo "images: warning: $*" >&2; }
die() {
	echo "images: error: $*" >&2
	exit 1
}

# ---------------------------------------------------------------------------
# helpers

# shellcheck source=scripts/lib.sh
source "$(dirname "$SCRIPT")/lib.sh"

with_lock() {
	mkdir -p "$IMAGES_DIR"
	exec 9>"${IMAGES_DIR}/.lock"
	flock -w 1800 9 || die "could not lock ${IMAGES_DIR}/.lock (another images.sh running?)"
}

need_root() {
	[ "$(id -u)" = 0 ] || die "$* needs root"
}

# Work dirs under IMAGES_DIR, removed on exit.
TMP_DIRS=()
cleanup() {
	local d
	for d in "${TMP_DIRS[@]}"; do
		safe_rm "$d" || true
	done
}
trap cleanup EXIT

# safe_rm DIR: remove a root file system tree, after unmounting whatever a
# failed debootstrap may have left mounted in it (proc, sys, a bind-mounted
# /dev); never across into another file system.
safe_rm() {
	local dir="$1" mp
	[ -e "$dir" ] || return 0
	dir="$(cd "$dir" && pwd -P)"
	while read -r mp; do
		umount -l "$mp" 2>/dev/null || true
	done < <(awk -v d="${dir}/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r)
	if awk -v d="${dir}/" 'index($2, d) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
		warn "something is still mounted under ${dir}; not removing it"
		return 1
	fi
	rm -rf --one-file-system "$dir"
}

sha() { sha256sum | cut -c1-16; }

# ---------------------------------------------------------------------------
# Docker engine

engine_answers() {
	command -v docker >/dev/null 2>&1 && timeout 20 docker info >/dev/null 2>&1
}

require_engine() {
	command -v docker >/dev/null 2>&1 || die "no docker CLI: apt-get install docker.io"
	engine_answers || die "no Docker engine answers ('docker info' fails); start one: scripts/images.sh engine start"
}

# engine_pid: the dockerd this script started, if it still runs.
engine_pid() {
	local pid
	pid="$(cat "$ENGINE_PID" 2>/dev/null)" || return 1
	proc_matches "$pid" dockerd || return 1
	echo "$pid"
}

engine_start() {
	if engine_answers; then
		info "engine: a Docker engine already answers (server $(docker version -f '{{.Server.Version}}' 2>/dev/null || echo '?'))"
		return 0
	fi
	command -v dockerd >/dev/null 2>&1 || die "engine: dockerd not found: apt-get install docker.io"
	command -v docker >/dev/null 2>&1 || die "engine: no docker CLI: apt-get install docker.io"
	need_root "engine: starting dockerd"
	with_lock
	local pid
	if pid="$(engine_pid)"; then
		info "engine: dockerd (pid ${pid}) started earlier does not answer yet; waiting for it"
	else
		mkdir -p "$RUN_DIR"
		info "engine: starting dockerd --bridge=none --iptables=false --ip6tables=false (log ${ENGINE_LOG})"
		echo "---- $(date -u +%Y-%m-%dT%H:%M:%SZ) scripts/images.sh engine start ----" >>"$ENGINE_LOG"
		rm -f "$ENGINE_PID"
		# A session of its own, detached from our stdio and our lock (fd 9);
		# the shell setsid runs writes its PID, then becomes dockerd.
		(
			# shellcheck disable=SC2016 # $$, $0 and $@ are the inner shell's
			setsid bash -c 'echo $$ >"$0"; exec "$@"' "$ENGINE_PID" \
				dockerd --bridge=none --iptables=false --ip6tables=false \
				</dev/null >>"$ENGINE_LOG" 2>&1 9>&- &
		)
	fi
	local deadline=$((SECONDS + ENGINE_TIMEOUT)) started=$SECONDS
	until engine_answers; do
		# Gone, not merely not dockerd yet: the shell that wrote its PID
		# execs dockerd a moment later, and is "bash" until it has.
		if [ -s "$ENGINE_PID" ] && ! kill -0 "$(cat "$ENGINE_PID" 2>/dev/null)" 2>/dev/null; then
			tail -n 30 "$ENGINE_LOG" >&2 || true
			die "engine: dockerd exited during startup (see ${ENGINE_LOG})"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			tail -n 30 "$ENGINE_LOG" >&2 || true
			die "engine: 'docker info' got no answer after ${ENGINE_TIMEOUT}s (see ${ENGINE_LOG}); dockerd left running: scripts/images.sh engine stop"
		fi
		sleep 0.5
	done
	info "engine: ready in $((SECONDS - started))s (dockerd pid $(engine_pid || echo '?'))"
}

engine_stop() {
	local pid
	if ! pid="$(engine_pid)"; then
		rm -f "$ENGINE_PID"
		if engine_answers; then
			info "engine: the Docker engine that answers was not started by this script; leaving it alone"
		else
			info "engine: not running"
		fi
		return 0
	fi
	with_lock
	info "engine: stopping dockerd (pid ${pid})"
	kill -TERM "$pid" 2>/dev/null || true
	if ! wait_gone "$pid" "$ENGINE_TIMEOUT"; then
		warn "engine: dockerd still running after ${ENGINE_TIMEOUT}s; killing it"
		kill -KILL "$pid" 2>/dev/null || true
		wait_gone "$pid" 10 || die "engine: dockerd (pid ${pid}) survived SIGKILL"
	fi
	rm -f "$ENGINE_PID"
	info "engine: stopped"
}

engine_status() {
	local pid owner="not started by this script"
	if pid="$(engine_pid)"; then
		owner="started by this script, pid ${pid}"
	fi
	if engine_answers; then
		info "engine: answering (server $(docker version -f '{{.Server.Version}}' 2>/dev/null || echo '?'); ${owner})"
	else
		info "engine: not answering${pid:+ (dockerd pid ${pid} is running)}"
		return 1
	fi
}

# ---------------------------------------------------------------------------
# The base root file system (debootstrap)

# debian_mirror: the first Debian mirror this machine's apt uses for SUITE
# (the only one reachable here); OXBOW_DEBIAN_MIRROR overrides.
debian_mirror() {
	if [ -n "${OXBOW_DEBIAN_MIRROR:-}" ]; then
		echo "$OXBOW_DEBIAN_MIRROR"
		return 0
	fi
	local m f
	m="$(
		{
			# One-line style: deb [options] URI SUITE COMPONENTS...
			for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
				[ -r "$f" ] || continue
				awk -v suite="$SUITE" '$1 == "deb" {
					i = 2
					if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
					if ($(i + 1) == suite) print $i
				}' "$f"
			done
			# deb822 style: paragraphs with Types, URIs, Suites.
			for f in /etc/apt/sources.list.d/*.sources; do
				[ -r "$f" ] || continue
				awk -v suite="$SUITE" 'BEGIN { RS = ""; FS = "\n" } {
					types = ""; uris = ""; suites = ""; enabled = "yes"
					for (i = 1; i <= NF; i++) {
						line = $i; key = tolower(line); sub(/:.*/, "", key); sub(/^[^:]*:[ \t]*/, "", line)
						if (key == "types") types = line
						else if (key == "uris") uris = line
						else if (key == "suites") suites = line
						else if (key == "enabled") enabled = tolower(line)
					}
					if (enabled == "no" || (" " types " ") !~ / deb /) next
					n = split(suites, s, /[ \t]+/)
					for (j = 1; j <= n; j++) if (s[j] == suite) { split(uris, u, /[ \t]+/); print u[1]; break }
				}' "$f"
			done
		} | grep -E '^https?://' | head -n 1
	)"
	if [ -z "$m" ]; then
		m=http://deb.debian.org/debian
		warn "base: no ${SUITE} mirror in /etc/apt/sources.list*; trying ${m} (set OXBOW_DEBIAN_MIRROR)"
	fi
	echo "${m%/}"
}

base_arch() { dpkg --print-architecture 2>/dev/null || echo amd64; }

base_key() {
	printf '%s\n' "revision=${BASE_REVISION}" "suite=${SUITE}" "arch=$(base_arch)" variant=minbase \
		"${BASE_PACKAGES[@]}" | sha
}

# base_tarball: the cached base tarball's path, if there is one.
base_tarball() {
	local key f
	key="$(base_key)"
	for f in "${IMAGES_DIR}/rootfs-${SUITE}-${key}.tar.zst" "${IMAGES_DIR}/rootfs-${SUITE}-${key}.tar.gz"; do
		if [ -s "$f" ]; then
			echo "$f"
			return 0
		fi
	done
	return 1
}

# base_trim ROOTFS: what neither image needs, and what is this machine's.
base_trim() {
	local r="$1"
	rm -rf "${r}/var/cache/apt/archives/"*.deb "${r}/var/cache/apt/"*.bin "${r}/var/lib/apt/lists/"*
	rm -rf "${r}/usr/share/doc/"* "${r}/usr/share/man/"* "${r}/usr/share/info/"*
	find "${r}/var/log" -type f -delete
	# The cluster the package made; the entrypoint inits its own in PGDATA.
	rm -rf "${r}/etc/postgresql/${PG_MAJOR}/main" "${r}/var/lib/postgresql/${PG_MAJOR}/main"
	# Docker provides these at run time.
	rm -f "${r}/etc/hostname" "${r}/etc/resolv.conf"
	printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"${r}/etc/hosts"
}

# base_ensure: debootstrap the base unless its tarball is cached; sets BASE_TAR.
base_ensure() {
	if BASE_TAR="$(base_tarball)"; then
		info "base: cached ${BASE_TAR}"
		return 0
	fi
	command -v debootstrap >/dev/null 2>&1 || die "base: debootstrap not found: apt-get install debootstrap"
	need_root "base: debootstrap"
	local key mirror work log="${IMAGES_DIR}/debootstrap.log" ext=gz started=$SECONDS
	key="$(base_key)"
	mirror="$(debian_mirror)"
	work="$(mktemp -d "${IMAGES_DIR}/debootstrap.XXXXXX")"
	TMP_DIRS+=("$work")
	info "base: debootstrap --variant=minbase ${SUITE} from ${mirror} with ${BASE_PACKAGES[*]} (a few minutes; log ${log})"
	if ! debootstrap --variant=minbase --arch="$(base_arch)" \
		--include="$(
			IFS=,
			echo "${BASE_PACKAGES[*]}"
		)" "$SUITE" "${work}/rootfs" "$mirror" >"$log" 2>&1; then
		if [ -f "${work}/rootfs/debootstrap/debootstrap.log" ]; then
			cp "${work}/rootfs/debootstrap/debootstrap.log" "${IMAGES_DIR}/debootstrap.inner.log" || true
		fi
		tail -n 30 "$log" >&2 || true
		die "base: debootstrap failed (see ${log} and ${IMAGES_DIR}/debootstrap.inner.log)"
	fi
	safe_rm_check_mounts "${work}/rootfs"
	base_trim "${work}/rootfs"
	command -v zstd >/dev/null 2>&1 && ext=zst
	local out="${IMAGES_DIR}/rootfs-${SUITE}-${key}.tar.${ext}"
	info "base: packing ${out}"
	local -a tar_c=(tar -C "${work}/rootfs" --numeric-owner --anchored
		'--exclude=./dev/*' '--exclude=./proc/*' '--exclude=./sys/*' '--exclude=./tmp/*' '--exclude=./run/*' -c .)
	if [ "$ext" = zst ]; then
		"${tar_c[@]}" | zstd -q -T0 -3 -o "${out}.tmp" -f
	else
		"${tar_c[@]}" | gzip -1 >"${out}.tmp"
	fi
	mv "${out}.tmp" "$out"
	# Older bases (another package list) are of no more use.
	find "$IMAGES_DIR" -maxdepth 1 -name "rootfs-*.tar.*" ! -name "$(basename "$out")" -delete
	safe_rm "$work" || true
	BASE_TAR="$out"
	info "base: done in $((SECONDS - started))s ($(du -h "$out" | cut -f1))"
}

# safe_rm_check_mounts DIR: fail when debootstrap left something mounted.
safe_rm_check_mounts() {
	local dir
	dir="$(cd "$1" && pwd -P)"
	if awk -v d="${dir}/" 'index($2, d) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
		die "base: debootstrap left file systems mounted under ${dir}"
	fi
}

base_extract() {
	local tar="$1" dir="$2"
	mkdir -p "$dir"
	case "$tar" in
	*.zst) zstd -q -d -c "$tar" | tar -C "$dir" --numeric-owner -xp ;;
	*) gzip -d -c "$tar" | tar -C "$dir" --numeric-owner -xp ;;
	esac
}

# ---------------------------------------------------------------------------
# The images

image_name() {
	case "$1" in
	kafka) echo "$KAFKA_IMAGE" ;;
	postgres) echo "$PG_IMAGE" ;;
	shoestore) echo "$SHOESTORE_IMAGE" ;;
	esac
}

# shoestore_binary: build the example store for the base's glibc (Debian
# bookworm, like the machines this runs on) into the images dir, once per
# change of its sources (go build's cache).
SHOESTORE_BIN="${IMAGES_DIR}/shoestore"
shoestore_binary() {
	command -v go >/dev/null 2>&1 || die "shoestore: go not found: the store's image holds its binary, built here"
	mkdir -p "$IMAGES_DIR"
	(cd "$REPO_DIR" && go build -trimpath -o "${SHOESTORE_BIN}.tmp" ./examples/shoestore) ||
		die "shoestore: go build ./examples/shoestore failed"
	mv "${SHOESTORE_BIN}.tmp" "$SHOESTORE_BIN"
}

# recipe NAME: the hash an image of the current recipe is labelled with.
recipe() {
	case "$1" in
	kafka)
		{
			echo "kafka ${KAFKA_VERSION} base $(base_key)"
			cat "$SCRIPT" "${ENTRY_DIR}/kafka-entrypoint.sh" "${REPO_DIR}/scripts/kafka/pom.xml"
		} | sha
		;;
	postgres)
		{
			echo "postgres ${PG_MAJOR} base $(base_key)"
			cat "$SCRIPT" "${ENTRY_DIR}/postgres-entrypoint.sh"
		} | sha
		;;
	shoestore)
		{
			echo "shoestore base $(base_key)"
			cat "$SCRIPT" "$SHOESTORE_BIN"
		} | sha
		;;
	esac
}

# image_state NAME: current, stale or missing.
image_state() {
	local label
	if ! label="$(docker image inspect --format "{{ index .Config.Labels \"${RECIPE_LABEL}\" }}" "$(image_name "$1")" 2>/dev/null)"; then
		echo missing
	elif [ "$label" = "$(recipe "$1")" ]; then
		echo current
	else
		echo stale
	fi
}

# image_files NAME ROOTFS: put the image's own files into the base.
image_files() {
	local r="$2"
	case "$1" in
	kafka)
		install -D -m 0755 "${ENTRY_DIR}/kafka-entrypoint.sh" "${r}/usr/local/bin/kafka-entrypoint"
		mkdir -p "${r}/opt/kafka/libs" "${r}/opt/kafka/config" "${r}/var/lib/kafka/data"
		cp "${KAFKA_LIBS}/"*.jar "${r}/opt/kafka/libs/"
		cat >"${r}/opt/kafka/config/tools-log4j2.properties" <<'EOF'
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
		cat >"${r}/usr/local/bin/kafka-class" <<'EOF'
#!/bin/bash
# kafka-class CLASS [ARGS...]: run a Kafka command-line class (for example
# org.apache.kafka.tools.TopicCommand) with the broker's jars, warnings to stderr.
exec java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
	-Dlog4j2.configurationFile=/opt/kafka/config/tools-log4j2.properties -cp '/opt/kafka/libs/*' "$@"
EOF
		chmod 0755 "${r}/usr/local/bin/kafka-class"
		;;
	postgres)
		install -D -m 0755 "${ENTRY_DIR}/postgres-entrypoint.sh" "${r}/usr/local/bin/postgres-entrypoint"
		;;
	shoestore)
		install -D -m 0755 "$SHOESTORE_BIN" "${r}/usr/local/bin/shoestore"
		mkdir -p "${r}/var/lib/shoestore"
		;;
	esac
}

# image_excludes NAME: tar options leaving out of the image what it does
# not use: the other image's part, translations and locale sources (both run
# in C.UTF-8, which glibc has built in), LLVM (PostgreSQL's JIT, off in the
# postgres image as its plugin goes too), and in the kafka image ICU and the
# perl modules. dpkg still lists those packages; nothing in the images runs
# apt or dpkg.
image_excludes() {
	# (Patterns for tar, quoted: they must not match files here.)
	local -a ex=('./dev/*' './proc/*' './sys/*' './tmp/*' './run/*' './usr/share/locale/*' './usr/share/i18n/*'
		'./usr/lib/*/libLLVM-*' './usr/lib/*/libz3.*')
	case "$1" in
	kafka)
		ex+=(./usr/lib/postgresql ./usr/share/postgresql ./usr/share/postgresql-common ./var/lib/postgresql
			./usr/local/bin/postgres-entrypoint ./usr/local/bin/shoestore ./var/lib/shoestore
			'./usr/lib/*/libicu*' ./usr/share/perl './usr/lib/*/perl' './usr/lib/*/libperl.*')
		;;
	postgres)
		ex+=(./usr/lib/jvm ./opt/kafka ./var/lib/kafka ./usr/local/bin/kafka-entrypoint ./usr/local/bin/kafka-class
			./usr/local/bin/shoestore ./var/lib/shoestore
			"./usr/lib/postgresql/${PG_MAJOR}/lib/llvmjit*" "./usr/lib/postgresql/${PG_MAJOR}/lib/bitcode")
		;;
	shoestore)
		ex+=(./usr/lib/jvm ./opt/kafka ./var/lib/kafka ./usr/local/bin/kafka-entrypoint ./usr/local/bin/kafka-class
			./usr/lib/postgresql ./usr/share/postgresql ./usr/share/postgresql-common ./var/lib/postgresql
			./usr/local/bin/postgres-entrypoint
			'./usr/lib/*/libicu*' ./usr/share/perl './usr/lib/*/perl' './usr/lib/*/libperl.*')
		;;
	esac
	printf -- '--exclude=%s\n' "${ex[@]}"
}

# image_changes NAME RECIPE: the Dockerfile instructions of the image, one a line.
image_changes() {
	local path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
	case "$1" in
	kafka)
		echo 'ENTRYPOINT ["/usr/local/bin/kafka-entrypoint"]'
		echo "ENV PATH=${path} LANG=C.UTF-8 OXBOW_KAFKA_VERSION=${KAFKA_VERSION}"
		echo 'WORKDIR /var/lib/kafka'
		echo 'STOPSIGNAL SIGTERM'
		echo "LABEL ${RECIPE_LABEL}=$2 dev.oxbow.base=$(base_key) org.opencontainers.image.title=oxbow-kafka org.opencontainers.image.version=${KAFKA_VERSION}"
		;;
	postgres)
		echo 'ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]'
		echo "ENV PATH=/usr/lib/postgresql/${PG_MAJOR}/bin:${path} LANG=C.UTF-8 PG_MAJOR=${PG_MAJOR} PGDATA=/var/lib/postgresql/data"
		echo 'WORKDIR /var/lib/postgresql'
		echo 'STOPSIGNAL SIGINT'
		echo "LABEL ${RECIPE_LABEL}=$2 dev.oxbow.base=$(base_key) org.opencontainers.image.title=oxbow-postgres org.opencontainers.image.version=${PG_MAJOR}"
		;;
	shoestore)
		# Flags after the image name (docker run, compose's command) go to
		# the store; KAFKA_BROKERS and OXBOW_PG_DSN are its defaults.
		echo 'ENTRYPOINT ["/usr/local/bin/shoestore", "-state-dir", "/var/lib/shoestore"]'
		echo "ENV PATH=${path} LANG=C.UTF-8"
		echo 'WORKDIR /var/lib/shoestore'
		echo 'STOPSIGNAL SIGTERM'
		echo "LABEL ${RECIPE_LABEL}=$2 dev.oxbow.base=$(base_key) org.opencontainers.image.title=oxbow-shoestore"
		;;
	esac
}

# import_takes_stopsignal: whether this engine's `docker import --change`
# accepts STOPSIGNAL (Docker 20.10 does not; the image config then gets it
# from a `docker build` of a Dockerfile with only FROM the imported image and
# STOPSIGNAL: no RUN, nothing pulled).
IMPORT_STOPSIGNAL=""
import_takes_stopsignal() {
	if [ -z "$IMPORT_STOPSIGNAL" ]; then
		local id
		if id="$(tar -c -T /dev/null | docker import --change 'STOPSIGNAL SIGTERM' - 2>/dev/null)"; then
			docker rmi "$id" >/dev/null 2>&1 || true
			IMPORT_STOPSIGNAL=yes
		else
			IMPORT_STOPSIGNAL=no
		fi
	fi
	[ "$IMPORT_STOPSIGNAL" = yes ]
}

# image_import NAME ROOTFS WORK: tar ROOTFS (less the other image's part) into
# a new image and tag it; remove the image the tag named before.
image_import() {
	local name="$1" rootfs="$2" work="$3" image recipe_hash old="" stopsignal=""
	image="$(image_name "$name")"
	recipe_hash="$(recipe "$name")"
	old="$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
	local -a changes=() excludes=()
	local line
	while IFS= read -r line; do
		if [[ "$line" == STOPSIGNAL* ]] && ! import_takes_stopsignal; then
			stopsignal="$line"
			continue
		fi
		changes+=(--change "$line")
	done < <(image_changes "$name" "$recipe_hash")
	mapfile -t excludes < <(image_excludes "$name")

	local started=$SECONDS target="$image"
	[ -z "$stopsignal" ] || target="${image}-import"
	info "${image}: importing"
	tar -C "$rootfs" --numeric-owner --anchored --no-wildcards-match-slash "${excludes[@]}" -c . |
		docker import "${changes[@]}" - "$target" >/dev/null ||
		die "${image}: docker import failed"
	if [ -n "$stopsignal" ]; then
		local ctx="${work}/ctx-${name}"
		mkdir -p "$ctx"
		printf 'FROM %s\n%s\n' "$target" "$stopsignal" >"${ctx}/Dockerfile"
		DOCKER_BUILDKIT=0 docker build -q -t "$image" "$ctx" >"${work}/build-${name}.log" 2>&1 || {
			cat "${work}/build-${name}.log" >&2
			die "${image}: docker build (${stopsignal}) failed"
		}
		docker rmi "$target" >/dev/null 2>&1 || true
	fi
	if [ -n "$old" ] && [ "$old" != "$(docker image inspect --format '{{.Id}}' "$image")" ]; then
		docker rmi "$old" >/dev/null 2>&1 || warn "${image}: the previous image ${old:7:12} is still in use; left in place"
	fi
	info "${image}: built in $((SECONDS - started))s ($(docker image inspect --format '{{.Size}}' "$image" | awk '{ printf "%d MB", $1 / 1e6 }'), recipe ${recipe_hash})"
}

# build_todo NAME...: set TODO to the images that are missing or stale; with
# -v, say so for each.
TODO=()
build_todo() {
	local verbose=0 t state
	if [ "$1" = -v ]; then
		verbose=1
		shift
	fi
	TODO=()
	for t in "$@"; do
		state="$(image_state "$t")"
		if [ "$state" != current ]; then
			TODO+=("$t")
		fi
		if [ "$verbose" = 1 ]; then
			case "$state" in
			current) info "$(image_name "$t"): up to date" ;;
			*) info "$(image_name "$t"): ${state}; building" ;;
			esac
		fi
	done
}

build() {
	local t
	require_engine
	for t in "$@"; do
		[ "$t" != shoestore ] || shoestore_binary
	done
	build_todo "$@"
	if [ "${#TODO[@]}" -gt 0 ]; then
		need_root "building images"
		# Another build may have made them while we waited for the lock.
		with_lock
	fi
	build_todo -v "$@"
	if [ "${#TODO[@]}" -gt 0 ]; then
		local started=$SECONDS
		for t in "${TODO[@]}"; do
			if [ "$t" = kafka ]; then
				OXBOW_CACHE_DIR="$CACHE_DIR" OXBOW_KAFKA_VERSION="$KAFKA_VERSION" \
					bash "${REPO_DIR}/scripts/services.sh" fetch kafka >&2 ||
					die "kafka: fetching Kafka ${KAFKA_VERSION}'s jars failed"
			fi
		done
		base_ensure
		local work
		work="$(mktemp -d "${IMAGES_DIR}/work.XXXXXX")"
		TMP_DIRS+=("$work")
		info "unpacking the base"
		base_extract "$BASE_TAR" "${work}/rootfs"
		for t in "${TODO[@]}"; do
			image_files "$t" "${work}/rootfs"
		done
		for t in "${TODO[@]}"; do
			image_import "$t" "${work}/rootfs" "$work"
		done
		safe_rm "$work" || true
		info "built ${TODO[*]} in $((SECONDS - started))s"
	fi
	for t in "$@"; do
		image_name "$t"
	done
}

status() {
	local t state rc=0
	if ! engine_answers; then
		info "no Docker engine answers; start one: scripts/images.sh engine start"
		return 1
	fi
	for t in kafka postgres; do
		state="$(image_state "$t")"
		case "$state" in
		current) info "$(image_name "$t"): up to date" ;;
		stale)
			info "$(image_name "$t"): stale (built from another recipe; scripts/images.sh build)"
			rc=1
			;;
		*)
			info "$(image_name "$t"): missing (scripts/images.sh build)"
			rc=1
			;;
		esac
	done
	return "$rc"
}

# ---------------------------------------------------------------------------

usage() {
	sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

main() {
	[ $# -ge 1 ] || usage
	local cmd="$1"
	shift
	case "$cmd" in
	build)
		[ $# -le 1 ] || usage
		case "${1:-all}" in
		all) build kafka postgres ;;
		kafka | postgres | shoestore) build "$1" ;;
		*) usage ;;
		esac
		;;
	status)
		[ $# -eq 0 ] || usage
		status
		;;
	names)
		[ $# -eq 0 ] || usage
		echo "$KAFKA_IMAGE"
		echo "$PG_IMAGE"
		;;
	engine)
		[ $# -eq 1 ] || usage
		case "$1" in
		start) engine_start ;;
		stop) engine_stop ;;
		status) engine_status ;;
		*) usage ;;
		esac
		;;
	-h | --help | help) usage ;;
	*) usage ;;
	esac
}

main "$@"
