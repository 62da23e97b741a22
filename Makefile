# make test  — everything CI runs: installs what is missing, lint, unit and integration tests
#              against a real Postgres and a real Kafka started for the run.
# make lint  — go vet, gofmt, go mod tidy check.
# make bench — Go benchmarks against the same real Postgres and Kafka.

.PHONY: test lint bench

test:
	scripts/test.sh

lint:
	scripts/lint.sh

bench:
	scripts/bench.sh
