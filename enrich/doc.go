// Package enrich owns joins: stream–table joins against co-partitioned table copies
// ([JoinTable]), global tables copied whole to every instance ([JoinGlobal]), lookups in an
// external store behind a cache kept fresh by CDC ([JoinLookup]), and windowed stream–stream
// joins ([JoinWindows]). Every join is a views step built on the views extension API
// (views.Process, views.NewCoTable, views.NewGlobalTable, views.Follow, views.Merge), so its
// state lives in changelogged stores and its effects commit with the batch that caused them.
//
// # Time
//
//   - Stream–table: a task's table copy is caught up to the table topic's end before its first
//     record is joined; afterwards a record sees the table changes that were in the topic when
//     its batch was polled and whose timestamps are not later than its own time.
//   - Global tables and lookup caches follow processing time: before each batch they apply
//     every change that was in their topic when the batch was polled.
//   - Windowed joins run in event time with a stream time per task (the largest record time
//     seen on either input); records later than their window plus grace go to the
//     dead-letter topic; unmatched records of outer sides are emitted once their window
//     closed, never earlier.
//
// # Invariants
//
//   - A join whose inputs are not co-partitioned refuses to start, naming both topics and
//     their partition counts ([JoinTable], [JoinWindows]; views.ErrCoPartition).
//   - A failed lookup is never a miss: after [Lookup].Attempts its record goes to the
//     dead-letter topic with reason "lookup" ([JoinLookup]).
//   - Lookups keep the order of each key's records; a batch commits only after every lookup
//     it started was joined or dead-lettered ([JoinLookup]).
//   - A windowed join emits a record with a nil partner only after no record that is not late
//     could still match it, and a late record goes to the dead-letter topic ([JoinWindows]).
package enrich
