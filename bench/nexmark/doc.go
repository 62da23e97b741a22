// Package nexmark owns the Nexmark event generator of tarn's benchmark and the raw franz-go
// consume that is the benchmark's ceiling: persons, auctions and bids, deterministic from a
// seed, written as JSON values to three Kafka topics, and read back end to end.
//
// The model follows the Nexmark generator of Apache Beam and Flink: of every 50 events, 1 is a
// person, 3 are auctions and 46 are bids; ids start at 1000; bids go mostly to hot auctions
// and come mostly from hot bidders; prices are log-uniform between 1 and 1,000,000 dollars (in
// cents). Event n happens at Config.Start + n/Config.Rate seconds. bench/README.md gives the JSON
// of each kind and the keys: a person by its id, an auction by its id, a bid by its auction.
//
// # Invariants
//
//   - [Generator.Event] depends only on the [Config] and the event's number: each event draws
//     from its own random source seeded with (seed, number), so chunks can be generated in
//     parallel and the same seed gives byte-identical events, keys and timestamps.
//   - [Write] produces events in number order through one idempotent producer, so every
//     partition of every topic holds its records in event order, identical from run to run.
//   - [Consume] reads each partition from its start to the end offset it saw when it began
//     ([ConsumeStats] counts exactly those records).
package nexmark
