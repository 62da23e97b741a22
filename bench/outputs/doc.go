// Package outputs owns the cross-system check of the Nexmark benchmark: it reads a query's
// output topic to its end and compares two systems' outputs by the rules of bench/README.md —
// stream outputs as multisets of (key, value), table outputs as the last value of each key —
// with values compared as parsed JSON (numbers by value), not as bytes.
//
// # Invariants
//
//   - [Read] reads read_committed up to the last stable offset each partition had when it
//     began, so aborted transactions never count and a finished run's output is read whole.
//   - A [Summary] holds digests, not records, so comparing millions of records needs tens of
//     bytes per record; a key met in two partitions of a table output is a difference, since
//     its last value would then depend on how the partitions interleave.
//   - [Compare] is symmetric: swapping its arguments swaps only the sides of the [Verdict].
package outputs
