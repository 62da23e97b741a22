// Package views owns the view definition language (Go code, typed with generics) and the runtime
// that keeps views fresh: a definition compiles to a topology, a topology splits into
// sub-topologies at repartition points, and a sub-topology times an input partition is a task,
// assigned to instances by Kafka's consumer-group protocol.
//
// # Defining a view
//
// [Define] takes a name and a function that builds the pipeline on a [Builder]. Operators that
// keep the element type are methods ([Stream.Filter]); operators that change it are functions,
// because Go methods cannot take type parameters ([Map], [FlatMap], [Aggregate]). Every operator
// takes a step name; step names are the stable operator names from which stores, changelog and
// repartition topics are named, so renaming a step is a new definition. Keys are strings: the
// key a view is served by over HTTP.
//
//	v, err := views.Define("prices", func(b *views.Builder) {
//		trades := views.Source(b, "trades", views.JSON[Trade]())
//		bySymbol := views.GroupBy(trades, "by-symbol", func(_ string, t Trade) string { return t.Symbol })
//		views.Aggregate(bySymbol, "range", views.MinMaxOf(func(t Trade) float64 { return t.Price })).Serve()
//	})
//
// Define checks the whole graph (names, windows, grace periods, aggregators) and returns every
// problem at once, naming the view and step; it never panics and uses no package state.
//
// # Time
//
// Records carry an event time: by default the Kafka record timestamp (create time or log-append
// time, whichever the topic keeps); [EventTime] takes it from a field, [ProcessingTime] uses the
// wall clock. Each input partition of a task has a watermark, the largest event time it has
// seen; a task's watermark is the smallest watermark over its input partitions that are not idle
// (no record for Config.IdleTimeout), so a quiet partition cannot stall windows. A record whose
// window ended more than the window's grace period before the watermark is late: it goes to the
// dead-letter topic with reason headers and is counted, never silently dropped. Inside grace it
// updates its window in place.
//
// # Fingerprint
//
// A view's [View.Fingerprint] hashes its graph: operator kinds and step names, source topics,
// codec names, window specs and version. The runtime keeps the fingerprint in a per-view meta
// store (key "fingerprint", changelogged like every store, so it survives a lost disk) and
// refuses to run a definition over state written by a different fingerprint: change the version
// to rebuild instead.
//
// # Delivery
//
// At-least-once (the default) may reprocess records after a crash: [CountOf], [SumOf] and
// [AvgOf] may then count a record twice, and user aggregators that are not idempotent too;
// [MinOf], [MaxOf], [MinMaxOf], [TopN] of distinct records and tables fed by CDC are idempotent.
// Exactly-once (Config.ExactlyOnce) uses Kafka transactions and leaves every view equal to one
// processing of each input record.
//
// # Invariants
//
//   - [Define] validates the whole graph before any record is read ([View]).
//   - Operator and store names derive only from the view name and step names, never from a
//     counter ([View.Fingerprint]).
//   - A [Runtime] applies a batch's writes to Pebble only after Kafka made the batch's changelog
//     records durable (acknowledged, or its transaction committed), and commits input offsets
//     only after that, so no acknowledged input is lost and local state is never ahead of its
//     changelog.
//   - Undecodable and late records go to the dead-letter topic with a reason and are counted.
package views
