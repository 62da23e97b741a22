// Package testenv gives tests a running Postgres and a running Kafka broker, real ones, chosen
// in this order:
//
//  1. addresses from the environment: TARN_TEST_POSTGRES_URL and TARN_TEST_KAFKA_BROKERS (the
//     README's test command starts both once and exports these for every package);
//  2. containers through testcontainers-go, when a Docker engine answers (its absence is
//     detected in well under a second);
//  3. local processes: a throwaway cluster of Debian's Postgres server binaries and a
//     single-node KRaft Apache Kafka from its Maven Central jars (scripts/kafka-jars.sh).
//
// A package uses it from TestMain, so that whatever it started is stopped when its tests end:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// and then, in a test, testenv.Kafka(t) for broker addresses, testenv.Postgres(t) for a URL.
package testenv
