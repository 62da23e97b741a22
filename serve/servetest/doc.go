// Package servetest owns the conformance suite of [serve.Backend]: the behaviours serve relies
// on from every backend, checked through the interfaces alone, so that serve's own fake and the
// real adapter of the views runtime are held to the same contract. [Conformance] runs it
// against a [Harness] that starts a backend and writes to its view.
//
// # Invariants
//
//   - The suite asserts only what serve's interfaces document ([serve.View] and its errors),
//     the same for every backend. The one case a harness can miss is the LSN case, which
//     needs writes that have LSNs ([LSNWriter]); it is skipped, saying so, without them.
//   - It never assumes how offsets count: a write moves its partition's position forward by
//     at least one, and a change's offset is below the position after it.
//   - Every wait is for the backend to apply a write, bounded by [Timeout]; none times
//     anything.
package servetest
