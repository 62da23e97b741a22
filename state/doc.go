// Package state owns local stores: key-value and windowed stores on one shared Pebble instance,
// each partition logged to a compacted Kafka changelog so that it survives the loss of its
// machine.
//
// # Invariants
//
//   - The changelog offset a store partition has applied is written in the same Pebble batch as
//     the data, so restore starts exactly where the local copy stopped.
package state
