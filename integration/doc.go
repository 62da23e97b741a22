// Package integration holds the end-to-end tests of tarn against a real Postgres and a real
// Kafka broker, started by internal/testenv (or named by TARN_TEST_POSTGRES_URL and
// TARN_TEST_KAFKA_BROKERS).
package integration
