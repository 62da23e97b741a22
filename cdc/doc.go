// Package cdc owns change data capture: it reads a Postgres publication through a logical
// replication slot (pgoutput, via pglogrepl) and writes every row change to that table's topic,
// `<app>.cdc.<schema>.<table>`, keyed by primary key, with deletes as tombstones.
//
// # Invariants
//
//   - The slot's confirmed flush LSN moves only after Kafka has acknowledged every record at or
//     below it, so a crash loses nothing.
package cdc
