#!/usr/bin/env bash
# Runs a command with one real Postgres and one real Kafka started for it (their addresses in
# TARN_TEST_POSTGRES_URL and TARN_TEST_KAFKA_BROKERS), and stops both when it ends, whatever
# happens.  Example: scripts/with-env.sh go test ./state/
set -euo pipefail
cd "$(dirname "$0")/.."

work="$(mktemp -d -t tarn-env-XXXXXX)"
envpid=""
cleanup() {
	if [[ -n "$envpid" ]]; then
		kill -TERM "$envpid" 2>/dev/null || true
		wait "$envpid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/tarn-testenv" ./internal/testenv/cmd/tarn-testenv
"$work/tarn-testenv" -env "$work/env.sh" &
envpid=$!
for _ in $(seq 1 600); do
	[[ -f "$work/env.sh" ]] && break
	kill -0 "$envpid" 2>/dev/null || { echo "with-env: Postgres or Kafka failed to start" >&2; exit 1; }
	sleep 0.2
done
[[ -f "$work/env.sh" ]] || { echo "with-env: Postgres and Kafka not up after 120s" >&2; exit 1; }
# shellcheck disable=SC1091
source "$work/env.sh"
"$@"
