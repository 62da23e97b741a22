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
// A windowed aggregation ([AggregateWindows]) can be served, written to a topic, or continued in
// the same task as the stream of its updates ([WindowedTable.ToStream]), e.g. re-keyed by
// window to rank the keys of each window.
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
// codec names, window specs and the declared [Version]. Function bodies cannot be hashed: a
// changed predicate with the same steps keeps the fingerprint, so bump [Version] to have it
// rebuilt. The runtime also keeps the fingerprint in a per-view meta store (key "fingerprint",
// changelogged like every store) and refuses to process a version's state written by another
// definition.
//
// # Versions and rebuilds
//
// Each view runs at data versions that the runtime numbers: stores, changelogs, repartition
// topics and the consumer group carry ".v<N>.". The versions topic (<app>.versions, compacted,
// one partition, key = view name) records per view the serving version with its fingerprint,
// the version being rebuilt with its state (rebuilding, failed, rolled back) and the replaced
// versions awaiting deletion. Every instance reads it at start and follows it.
//
// At start, a definition whose fingerprint is the serving version's resumes it. A new
// fingerprint starts version N+1 (at least the declared [Version]); [Runtime.Rebuild] starts
// one on demand with the same definition. The new version runs beside the old one with its own
// group, reading every input from the earliest offset (CDC tables from their compacted
// topics), limited to [RebuildConfig].RecordsPerSecond per instance. While it catches up:
//
//   - after a code change the binary has only the new definition, so the old version is
//     frozen: it keeps its group membership, restores its served store from its changelog on
//     the partitions it is assigned and answers queries from it, but processes no new input
//     (its answers age until the switch; output topics of the old version stop);
//   - after an on-demand rebuild the definition is the same and the old version keeps
//     processing.
//
// Progress (records processed here, lag per source partition over all instances from the new
// group's committed offsets, rate and time left) is logged, exported as metrics and shown in
// [Info].Rebuild. When the new version is at most [RebuildConfig].SwitchLag records behind on
// every partition, the instance holding its first task runs the shadow check ([ShadowReport])
// and writes the switch to the versions topic. The check compares the latest values of both
// versions' served changelogs, on a sample or all keys. When both versions process input (an
// on-demand rebuild), it first holds them at one cut of their source offsets, through the
// versions topic: on every instance both versions stop their source partitions at the cut
// (later records wait in their topics), drain their repartition topics, and are compared once
// both groups' committed offsets are at the cut, so an unchanged definition reports no
// difference however fast input arrives; the report names the cut. The hold ends with the
// comparison, and after [RebuildConfig].ShadowHold at the latest: a version that cannot reach
// the cut delays ingest no longer, and the report says why it compared the versions where
// they stood.
// Every instance follows the switch: queries read the serving version, and a read spanning
// instances pins one version ([Runtime.Pin]) so it never mixes partitions of two versions. After [RebuildConfig].DeleteAfter the old version's
// engines stop, its local stores are dropped and its topics and group deleted;
// [Runtime.Rollback] before that makes it serve again. A rebuild whose engine fails (an error,
// or a panic of view code) is recorded as failed with the reason, and the old version keeps
// serving; it is not retried until [Runtime.Rebuild] is called. A binary whose definition was
// replaced runs no version of the view ([Info].Problem).
//
// Rebuilding re-emits the view's output-topic records and dead letters from the beginning:
// consumers of those topics see the history again.
//
// # Delivery
//
// At-least-once (the default) may reprocess records after a crash: [CountOf], [SumOf] and
// [AvgOf] may then count a record twice, and user aggregators that are not idempotent too;
// [MinOf], [MaxOf], [MinMaxOf], [TopN] of distinct records and tables fed by CDC are idempotent.
// Exactly-once (Config.ExactlyOnce) uses Kafka transactions and leaves every view equal to one
// processing of each input record.
//
// # Extending
//
// Operators outside this package (the joins of package enrich) are built on a small API:
// [Process] adds a step with its own changelogged stores ([KVStore], [WindowStore]), emission,
// time, watermark and dead letters ([ProcessContext]) and a Flush that finishes work started
// for a batch before it commits; [Local] and [BatchLocal] hold per-runtime and per-batch
// state. Side inputs are read outside the consumer group, by partition: [NewCoTable] keeps
// partition p of a table topic in task p, caught up to the topic's end before the task's first
// record and then merged with the stream in time order; [NewGlobalTable] and [Follow] read
// every partition on every instance, applied before each batch up to the ends the topics had
// when it was polled. [CoPartition] repartitions a stream with a table's partition count, and
// [Merge] reads two co-partitioned inputs in one task (the group then uses range assignment,
// which co-locates equal partitions).
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
//   - Size is not an error: a record up to [Config].MaxRecordBytes (16 MiB by default) fits
//     every topic the runtime creates (each gets a max.message.bytes to match) and its
//     clients' produce and fetch limits. An output, repartition record or store write above
//     its topic's limit (that, or a smaller max.message.bytes an existing topic has, which
//     start-up names in a warning) is never produced: the input record goes to the
//     dead-letter topic with reason "too-large", its size and the limit and without its
//     value, is counted, and the view goes on. A dead letter too large for its topic loses
//     its value (header "tarn.value-bytes" gives the size). Kafka refusing a record for its
//     size anyway (a topic's limit lowered while running) makes the runtime read the limits
//     again and redo the batch, which then dead-letters it; refused once more, the view stops
//     with the fix in the message: nothing retries it for ever.
//   - A [CoTable] partition's store and the table offset it applied are written in the same
//     batch, and a task joins its first record only after its copy reached the end the table
//     topic had when the task started.
//   - Every instance follows one versions topic partition in order, so all see the same
//     sequence of switches; a [Pinned] read reads one version only, so a fanned-out read never
//     mixes versions. Serving moves only to a version whose group lag is under the threshold
//     on every partition, and a failed rebuild never changes the serving version.
//   - The shadow check's hold loses and repeats no input: a held record is never processed
//     nor covered by a commit or a transaction; its partition is rewound to it and fetches it
//     when the hold ends.
//   - A replaced version is deleted only after [RebuildConfig].DeleteAfter, and its topics
//     only once its group is empty (or a minute later), so pinned reads and [Runtime.Rollback]
//     have it until then.
package views
