#!/usr/bin/env bash
# The test command of the README (`make test`): installs what is missing, checks vet, gofmt and
# go.mod tidiness, then runs every package's tests against one real Postgres and one real Kafka
# started for the whole run (scripts/with-env.sh). Extra arguments go to go test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
scripts/lint.sh
# Every package, then the race detector on those that run goroutines of their own (views runs a
# batch's tasks in parallel) and whose suites are short enough (cdc's SIGKILL suite is not).
scripts/with-env.sh sh -c 'go test -count=1 -timeout 25m "$@" ./... &&
	go test -race -count=1 -timeout 15m ./state/... ./views/... ./enrich/... ./serve/... ./internal/... . ./cdc/internal/... ./bench/outputs/' sh "$@"
# The harness's container path, once per run, on a local Docker engine with images built from
# this machine's binaries; skips with a reason (exit 0) when no engine can run here.
scripts/test-containers.sh
