# Helpers shared by the scripts in this folder; sourced, not run.
# shellcheck shell=bash

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
	timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# proc_matches PID WORD...: PID is alive and its command line contains every WORD
# (guards against a stale PID file naming a reused PID).
proc_matches() {
	local pid="$1" cmd word
	shift
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	cmd="$(tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null)" || return 1
	for word in "$@"; do
		[[ "$cmd" == *"$word"* ]] || return 1
	done
}

# launched_alive PIDFILE: the process whose pid the file holds has not
# exited. For startup checks, where proc_matches can fail on a live process:
# its command line reads empty while it execs (CI saw a node of the cluster
# reported "exited during startup" that went on to run).
launched_alive() {
	local pid state
	pid="$(cat "$1" 2>/dev/null)" || return 1
	[[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
	state="$(sed 's/.*) //' "/proc/${pid}/stat" 2>/dev/null | cut -d' ' -f1)"
	[ "$state" != Z ]
}

# wait_gone PID SECONDS: wait until PID has exited; 1 if it is still there.
wait_gone() {
	local pid="$1" deadline=$((SECONDS + $2))
	while kill -0 "$pid" 2>/dev/null; do
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.2
	done
}
