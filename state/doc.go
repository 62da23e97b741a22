// Package state owns tarn's local stores: key-value ([KV]) and windowed ([Window]) store
// partitions kept as namespaces of the process's one Pebble instance ([DB]), each logged to
// partition p of its compacted changelog topic so that it survives the loss of its machine.
//
// A task writes through a [Txn]: reads during processing see the Txn's pending writes; then
// [Txn.Produce] sends them to the changelogs with the caller's Kafka client (inside the
// caller's Kafka transaction when exactly-once is on) and [Txn.Apply], once Kafka made them
// durable, writes data and offsets in one Pebble batch. On assignment [DB.Restore] reads each
// changelog from the applied offset to its end. [EnsureChangelog] creates or checks the
// topics. Reads of a consistent point in time go through a [Snapshot].
//
// Memory is governed in one place: [Config].MemoryBytes sizes the one block cache and the
// memtables shared by every store, and [RestoreConfig] bounds restore's fetch buffers.
//
// # Invariants
//
//   - The changelog offset a store partition has applied is written in the same Pebble batch
//     as the data it covers ([Txn.Apply], and every restore batch), so restore starts exactly
//     where the local copy stopped and a crash never leaves the offset ahead of the data.
//   - Local data never gets ahead of the changelog: [Txn.Apply] refuses to run before a
//     successful [Txn.Produce]. It may fall behind (a crash between the two); [DB.Restore]
//     catches it up. A store whose offset lies outside its changelog is wiped and rebuilt.
//   - Restore reads read_committed and stops at the last stable offset, counting control
//     records as reached, so aborted transactions are never applied and transactional
//     changelogs finish.
//   - Store partitions are namespaces with prefix-free keys ([ID] names never hold 0x00):
//     [DB.DropVersion] and [DB.DropPartition] are single range deletes that touch nothing else.
//   - A [Window]'s expired segments are removed with one range delete and their windows are
//     tombstoned in the same changelog write, so local store and compacted changelog agree.
//   - A malformed changelog record stops restore with a [*MalformedError] naming topic,
//     partition and offset; decoding never panics.
//
// Known limits: restore detects its end by the offset of the record at end-1 (data or
// control); were that record removed by compaction (possible only when the last stable
// offset is held back by an open transaction across a segment roll), restore would wait for
// more data. A windowed store's stream time is the largest window start written: after a
// full restore from a compacted changelog it can be lower than before if the newest window
// was deleted, which only delays expiry.
package state
