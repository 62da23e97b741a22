// Package tarnq owns tarn's implementations of the Nexmark queries of bench/README.md, as
// views over the generator's topics, for bench/run.sh to run beside the Kafka Streams peer.
//
// Only the stateless queries (q0, q1, q2) are written so far; [Define] returns
// [ErrNotImplemented] for the others.
//
// # Invariants
//
//   - Every view [Define] returns writes the output format bench/README.md gives for its query,
//     so tarn's and Kafka Streams' outputs can be compared record by record.
package tarnq
