#!/usr/bin/env bash
# Runs the integration tests once more through the harness's container path: a Docker engine
# (scripts/dockerd.sh starts Debian's dockerd when none answers, and this script stops it again),
# images built from this machine's own Postgres and Kafka (scripts/images.sh, no registry) and
# tarn's image from the Dockerfile (scripts/tarn-image.sh, modules vendored), and
# testcontainers-go starting all three (TestContainerTarn runs tarn through tarntest). When no engine can run here it says why and exits 0: the
# container tests are skipped and nothing else depends on them. Extra arguments go to go test
# (default: -run 'Container|Smoke').
set -euo pipefail
cd "$(dirname "$0")/.."

if scripts/dockerd.sh status >/dev/null 2>&1; then
	started=""
else
	started=1
fi
if ! host="$(scripts/dockerd.sh start 2>&1)"; then
	echo "containers: skipped, no Docker engine can run here: $host" >&2
	exit 0
fi
host="$(tail -n 1 <<<"$host")"
if [[ -n $started ]]; then
	trap 'scripts/dockerd.sh stop' EXIT
fi
export DOCKER_HOST="$host"
# No registry: ryuk (the reaper image) cannot be pulled; Main removes what the tests start, and
# stopping dockerd removes what a killed test left.
export TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1
# Assigned first: a failing build must stop the script, which eval "$(...)" would not.
exports="$(scripts/images.sh)"
eval "$exports"
exports="$(scripts/tarn-image.sh)"
eval "$exports"
# The container path is taken only when no addresses are given, and must not be skipped here.
unset TARN_TEST_POSTGRES_URL TARN_TEST_KAFKA_BROKERS TARN_TEST_POSTGRES_LOG TARN_TEST_KAFKA_LOG TARN_TEST_NO_CONTAINERS
export TARN_TEST_REQUIRE_CONTAINERS=1
if (($# == 0)); then
	set -- -run 'Container|Smoke'
fi
go test -count=1 -timeout 10m "$@" ./integration/
