// Package servebackend owns the seam between the views runtime and serve: [Backend] answers
// serve's [serve.Backend] and [serve.View] from a [views.Runtime], and turns a read's min_lsn
// into waits on the views by following the CDC source's position topic. Neither serve nor
// views imports it; the tarn instance wires it between them.
//
// Its tests run serve's conformance suite (serve/servetest) against it on a real Kafka, for a
// view of a Kafka topic and for a view of a Postgres table read through the real CDC source.
//
// # Invariants
//
//   - Positions are serve's: the next offset to apply per partition, one above the last
//     changelog offset views reports ([Backend] converts every position it hands out), so a
//     zero position means nothing applied yet.
//   - An answer's LSN is one up to which the view has applied every write of the CDC source:
//     it is read before the data it goes with, so the data is at least as new, and it holds
//     only for the serving version it was proved for (appliedLSN).
//   - Scan and Subscribe refuse partitions this instance does not own or still restores
//     ([serve.NotOwnerError], [serve.ErrRestoring]), as serve's contract asks.
//   - A live subscription ends with its reason: [serve.ErrSwitched] when the view serves
//     another version, [serve.ErrMoved] when a partition left this instance,
//     [serve.ErrStopping] once [Backend.Run] has returned.
package servebackend
