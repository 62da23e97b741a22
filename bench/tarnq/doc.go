// Package tarnq owns tarn's implementations of the Nexmark queries of bench/README.md, as
// views over the generator's topics, for bench/run.sh to run beside the Kafka Streams peer:
// [Define] returns a query's [Plan] (its views and the topics each reads), [Progress] says
// when a run has taken every input through, and [Plan.Restore] rebuilds its stores from their
// changelogs into an empty state dir.
//
// Every query of bench/README.md is written: q0, q1, q2 (stateless), q5, q7, q17, q18
// (stateful) and the joins q3, q8, q20 (package enrich); [Define] returns
// [ErrNotImplemented] for any other name.
//
// How each stateful query maps onto views, and what it costs beside Kafka Streams:
//
//   - q7 maps each bid to its window, repartitions by window and keeps the best bid per
//     window ([Higher]): the peer's plan.
//   - q18 repartitions bids by (bidder, auction) and keeps the latest: the peer avoids the
//     repartition with its Processor API, since every pair is already in one task; views has
//     no grouping by a new key that stays in its task.
//   - q5 counts bids per auction in hopping windows and continues with the counts' updates
//     ([views.WindowedTable.ToStream]), re-keyed by window and repartitioned, to keep each
//     window's hottest auction: the peer's plan. q17 aggregates per auction and day in
//     tumbling windows and maps each update to its output record, with no repartition.
//   - q3 repartitions auctions of category 10 by seller and joins the person table
//     (enrich.JoinTable); q20 joins bids with the auction table without repartitioning. Both
//     keep a match only when the row is not later than the stream record: the co-table is
//     caught up to its topic's end before the first join, and Nexmark rows are never
//     updated, so that condition is the table as of the record's time (see joins.go).
//   - q8 repartitions auctions by seller and joins them with persons in a windowed join of
//     one window either way (enrich.JoinWindows), keeping pairs of the same tumbling window;
//     its grace covers the skew between the person topic and the repartitioned auctions.
//
// # Invariants
//
//   - Every plan [Define] returns writes the output format bench/README.md gives for its
//     query, so tarn's and Kafka Streams' outputs can be compared record by record
//     (bench/outputs).
//   - [Progress.Done] is true only after every view's group committed its inputs to the ends
//     captured before the run and its repartition topics to their ends; the
//     runtime commits offsets only after a batch's effects are durable, so the output is then
//     complete.
package tarnq
