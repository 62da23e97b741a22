// Package testenv gives tests a running Postgres and a running Kafka broker, real ones, chosen
// in this order:
//
//  1. addresses from the environment: TARN_TEST_POSTGRES_URL and TARN_TEST_KAFKA_BROKERS (the
//     README's test command starts both once and exports these for every package);
//  2. containers through testcontainers-go, when a Docker engine answers (its absence is
//     detected in well under a second);
//     PostgresContainer and KafkaContainer force this path (skipping when no engine answers);
//     scripts/test-containers.sh runs it with a local dockerd and images that scripts/images.sh
//     builds from the machine's own binaries, since no registry is reachable here;
//  3. local processes: a throwaway cluster of Debian's Postgres server binaries and a
//     single-node KRaft Apache Kafka from its Maven Central jars (scripts/kafka-jars.sh).
//
// A package uses it from TestMain, so that whatever it started is stopped when its tests end:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// and then, in a test, testenv.Kafka(t) for broker addresses, testenv.Postgres(t) for a URL.
//
// # Invariants
//
//   - Whatever a process started ([Main], [StopAll]) is stopped when its tests end; a broker
//     also dies with a test binary killed hard (Pdeathsig).
//   - Tests sharing one server never share a database: [Postgres] makes a new one per call.
package testenv
