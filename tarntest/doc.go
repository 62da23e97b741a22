// Package tarntest owns running tarn in a container for the integration tests of services that
// use it: [Run] starts a tarn image with testcontainers-go, wired to Kafka and Postgres, waits
// until its /readyz answers 200, and returns a [Container] with the HTTP base URL and a
// [Client] for the view API.
//
// A test starts Kafka and Postgres as it likes (testcontainers modules, a compose file, local
// processes), passes their addresses with [WithKafka] and [WithPostgres], and terminates the
// container at the end:
//
//	tc, err := tarntest.Run(ctx, "tarn:dev", tarntest.WithKafka(brokers...), tarntest.WithPostgres(pgURL))
//	defer tc.Terminate(ctx)
//	var stats struct{ Orders int }
//	err = tc.Client.Get(ctx, "orders-per-customer", "7", &stats)
//
// The image is tarn's (the repository's Dockerfile) or one of a program of the user's own built
// on tarn.Main the same way; [WithCmd] and [WithEntrypoint] choose what runs.
//
// # Invariants
//
//   - [Run] returns a [Container] only once tarn answers /readyz with 200; on any error it has
//     removed the container it started, and the error carries the tail of its output.
//   - Addresses given with [WithKafka] and [WithPostgres] are used as they are: on the default
//     bridge network 127.0.0.1 is the container itself, so use [WithHostNetwork] (Linux) for
//     brokers and databases on the host, or [WithNetwork] and their aliases for containers.
//   - [Client] never retries: a view that is not ready answers with a [*Problem], which the
//     caller may poll on.
package tarntest
