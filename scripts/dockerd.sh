#!/usr/bin/env bash
# Gives the container tests a Docker engine: when none answers, starts Debian's dockerd (package
# docker.io, installed when missing) as a background process of its own, and stops it by PID.
#
#   scripts/dockerd.sh start    prints the DOCKER_HOST to use (an engine that already answers, or ours)
#   scripts/dockerd.sh status   prints it and exits 0 when an engine answers, else exits 1
#   scripts/dockerd.sh stop     stops the dockerd this script started, if it runs
#
# Ours keeps its images in a cache outside the repository (so images built once are kept) and
# its socket, pid file and runtime state in a short folder under /tmp (socket paths are limited
# to 108 bytes):
#
#   TARN_CACHE          cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/tarn)
#   TARN_DOCKERD_RUN    runtime folder (default /tmp/tarn-dockerd-<uid>)
#
# Exits non-zero with the reason on stderr when no engine can run here (not root, no package,
# dockerd dies); callers then skip the container tests with that reason.
set -euo pipefail

cache="${TARN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tarn}"
run="${TARN_DOCKERD_RUN:-/tmp/tarn-dockerd-$(id -u)}"
ours="unix://$run/docker.sock"
pidfile="$run/dockerd.pid"
logfile="$run/dockerd.log"

fail() {
	echo "dockerd: $*" >&2
	exit 1
}

# answers HOST: the engine at HOST replies to a version request within a few seconds.
answers() {
	command -v docker >/dev/null || return 1
	timeout 5 docker -H "$1" version --format '{{.Server.Version}}' >/dev/null 2>&1
}

# answering prints the first engine that answers: DOCKER_HOST, the default socket, then ours.
answering() {
	local h
	for h in ${DOCKER_HOST:+"$DOCKER_HOST"} unix:///var/run/docker.sock "$ours"; do
		if [[ $h != unix://* || -S ${h#unix://} ]] && answers "$h"; then
			echo "$h"
			return 0
		fi
	done
	return 1
}

ours_pid() {
	[[ -f $pidfile ]] || return 1
	local pid
	pid="$(cat "$pidfile")"
	# A pid file left from before a reboot may name an unrelated process: check its name.
	[[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == dockerd ]] && echo "$pid"
}

install_engine() {
	command -v dockerd >/dev/null && return 0
	command -v apt-get >/dev/null || fail "dockerd not found and no apt-get to install docker.io"
	echo "dockerd: installing Debian's docker.io" >&2
	# docker.io brings its own CLI as /usr/bin/docker; a newer one earlier on PATH keeps winning.
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io; } \
		>"$cache/docker.io-install.log" 2>&1 ||
		fail "apt-get install docker.io failed; see $cache/docker.io-install.log"
	command -v dockerd >/dev/null || fail "docker.io installed but dockerd not on PATH"
	command -v docker >/dev/null || fail "no docker CLI on PATH"
}

start() {
	if answering; then
		return 0
	fi
	[[ $(id -u) -eq 0 ]] || fail "no Docker engine answers, and starting dockerd needs root (uid $(id -u))"
	mkdir -p "$cache/dockerd" "$run"
	install_engine
	if pid="$(ours_pid)"; then
		# Started by an earlier run but not answering yet (or hung): wait for it below.
		:
	else
		rm -f "$pidfile" "$run/docker.sock"
		# setsid: the engine outlives this script and the shell that called it; stop ends it.
		setsid dockerd --data-root "$cache/dockerd" --exec-root "$run/exec" --pidfile "$pidfile" \
			-H "$ours" --log-level warn >"$logfile" 2>&1 </dev/null &
		pid=$!
	fi
	for _ in $(seq 1 150); do
		if [[ -S $run/docker.sock ]] && answers "$ours"; then
			echo "$ours"
			return 0
		fi
		kill -0 "$pid" 2>/dev/null || fail "dockerd exited during start; last lines of $logfile:
$(tail -n 15 "$logfile")"
		sleep 0.2
	done
	fail "dockerd (pid $pid) does not answer after 30s; see $logfile"
}

stop() {
	local pid
	pid="$(ours_pid)" || { rm -f "$pidfile"; return 0; }
	kill -TERM "$pid"
	# dockerd stops its containers (10 s grace each at most) and its containerd before exiting.
	for _ in $(seq 1 300); do
		kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	rm -f "$pidfile"
	fail "dockerd (pid $pid) did not stop within 30s; killed it"
}

case "${1:-}" in
start) start ;;
status) answering ;;
stop) stop ;;
*) fail "usage: $0 start|status|stop" ;;
esac
