#!/usr/bin/env bash
# Runs the Go benchmarks against a real Postgres and Kafka started for the run (the same set-up
# as the tests), then issue #17's event-to-queryable latency benchmark through `tarn serve`
# (integration.TestEventToQueryable, which runs only when TARN_BENCH_LATENCY is set; see
# bench/README.md). Pass a -bench pattern to narrow the Go benchmarks (the latency run is then
# left out): scripts/bench.sh -bench Restore ./state/. Only the latency run:
# scripts/bench.sh latency
set -euo pipefail
cd "$(dirname "$0")/.."
latency=(env TARN_BENCH_LATENCY=1 go test -v -run '^TestEventToQueryable$' -count 1 -timeout 10m ./integration/)
if (($# == 1)) && [[ "$1" == latency ]]; then
	exec scripts/with-env.sh "${latency[@]}"
fi
if (($# > 0)); then
	exec scripts/with-env.sh go test -run '^$' -benchtime 1x -timeout 60m "$@"
fi
# shellcheck disable=SC2016
exec scripts/with-env.sh bash -c 'go test -run "^$" -bench . -benchtime 1x -timeout 60m ./... && "$@"' bench "${latency[@]}"
