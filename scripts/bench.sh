#!/usr/bin/env bash
# Runs the Go benchmarks against a real Postgres and Kafka started for the run (the same set-up
# as the tests). Pass a -bench pattern to narrow it: scripts/bench.sh -bench Restore ./state/
set -euo pipefail
cd "$(dirname "$0")/.."
if (($# == 0)); then
	set -- -bench . ./...
fi
exec scripts/with-env.sh go test -run '^$' -benchtime 1x -timeout 60m "$@"
