#!/usr/bin/env bash
# vet, gofmt and go.mod tidiness: the checks CI fails on.
set -euo pipefail
cd "$(dirname "$0")/.."

go vet ./...
unformatted="$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"
if [[ -n "$unformatted" ]]; then
	echo "lint: gofmt needed on:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go mod tidy -diff >/dev/null || { echo "lint: go.mod/go.sum are not tidy; run go mod tidy" >&2; go mod tidy -diff >&2 || true; exit 1; }
