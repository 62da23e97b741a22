# make test  — everything CI runs: installs what is missing, lint, unit and integration tests
#              against a real Postgres and a real Kafka started for the run.
# make lint  — go vet, gofmt, go mod tidy check.
# make bench — Go benchmarks against the same real Postgres and Kafka, then the event-to-queryable
#              latency table (integration.TestEventToQueryable; bench/README.md).
# make bench-nexmark — Nexmark queries on tarn and on Kafka Streams side by side (bench/run.sh;
#              EVENTS=5000000 make bench-nexmark for the full run).

.PHONY: test lint bench bench-nexmark

test:
	scripts/test.sh

lint:
	scripts/lint.sh

bench:
	scripts/bench.sh

bench-nexmark:
	bench/run.sh
