// Package cdc owns change data capture: it reads a Postgres publication through a logical
// replication slot (pgoutput protocol 1, via pglogrepl) and writes every row change to that
// table's topic, `<app>.cdc.<schema>.<table>` (topic.CDCTable), keyed by primary key, with
// deletes as tombstones. A [Source] is built with [New] from a [Config] and run with
// [Source.Run].
//
// # Records
//
// Key: the primary key's Postgres text form when it has one column (e.g. `42`), else a JSON
// array of the key columns' texts in column order (`["42","2024-05-01"]`); see [EncodeKey].
// Tables without a primary key are accepted only with REPLICA IDENTITY FULL (or USING INDEX)
// and are then keyed by all their columns (identical duplicate rows collapse into one).
// Partition: partition.For(key, n), Kafka's murmur2, the same as kgo.StickyKeyPartitioner.
//
// Value: the row as a JSON object (decode with [DecodeRow]): bool → true/false; integers,
// numeric, float4/8 → JSON numbers with every digit of the Postgres text (decode with
// json.Number or json.RawMessage, never float64, to keep them exact), NaN/±Infinity →
// strings; json/jsonb embedded; timestamptz → RFC 3339 in UTC ("2024-05-01T10:00:00.5Z");
// timestamp → RFC 3339 without zone; bytea → base64; arrays → JSON arrays of their element
// type; NULL → null; uuid, date, time, interval, enums and anything else → the Postgres
// text. Values that have no such form (BC or 5-digit years, infinities, arrays with explicit
// bounds) are the Postgres text in a string: never a wrong value.
//
// Headers: [HeaderLSN] (commit LSN), [HeaderSeq] (place in the transaction), [HeaderXid],
// [HeaderCommitTime], [HeaderOp] ([OpSnapshot], [OpInsert], [OpUpdate], [OpDelete],
// [OpTruncate]). An update that changes the key writes a tombstone for the old key first.
//
// TRUNCATE is a barrier: one marker per partition ([IsTruncate]: key [TruncateKey], no
// value, op truncate) at the truncate's place in its transaction; a table store deletes
// every row of the table it holds for that partition. Compacted topics refuse records
// without a key, hence the reserved key. A snapshot starts with such markers too.
//
// # Snapshot and stream
//
// On its first run the source creates the slot with an exported snapshot, reads every table
// in that snapshot (in chunks, with progress logs and metrics), then streams from the slot's
// consistent point. Postgres sends a transaction only once it has committed, so the source
// writes each change as it arrives and holds no transaction in memory; the server spills
// large transactions to disk (logical_decoding_work_mem). Unchanged TOAST columns of updates
// are filled from a local copy of each key's last row (a Pebble store in Config.Dir, rebuilt
// from the table topics whenever it is not exactly at the source's position), or from the
// old tuple of REPLICA IDENTITY FULL tables.
//
// # Delivery
//
// Changes are written in batches of whole transactions. With Config.Transactional each batch
// and the source's position ([topic.CDCPosition]) form one Kafka transaction: exactly-once,
// and a restart produces no duplicates. Without it (the default) the position is written
// after the batch is acknowledged: at-least-once; after a crash the transactions after the
// last position are written again with the same (lsn, seq), and a consumer that skips
// records whose [Position] is not after the last one applied on that partition sees each
// change once. Either way nothing is lost.
//
// # Large rows
//
// A row change up to [Config].MaxRecordBytes (16 MiB by default, key, value and headers)
// goes to its table topic like any other: the source creates its topics with a
// max.message.bytes to match and sizes its producer batches and fetches for it. A larger one
// (or one above the smaller max.message.bytes of a table topic that already existed, which
// start-up names in a warning) is not written there, because Kafka would refuse it on every
// retry and the source would stall: it goes to the application's dead-letter topic
// (topic.DLQ) with its key, its CDC headers, "tarn.reason: too-large", its size and the
// limit, without its value; tarn_cdc_dead_letters_total counts it, a warning names table,
// key and size, and the source goes on. Views then keep the row's previous value (or lack
// the row) until a later change of it fits. Kafka refusing a record for its size anyway (a
// limit lowered while running) stops the source with [ErrRecordTooLarge] and the fix.
//
// # Invariants
//
//   - The slot's confirmed flush LSN is only ever the position durable in Kafka (write, flush
//     and apply all set to it), sent from its own goroutine, so a crash loses nothing and a
//     busy apply loop cannot miss wal_sender_timeout.
//   - Streaming starts at the source's own durable position, never at IDENTIFY_SYSTEM's or the
//     slot's (which Postgres 15 can move backwards after a restart); a slot confirmed past it
//     is refused with [ErrSlotAhead], a different system or timeline with [ErrServerChanged].
//   - Transactions are de-duplicated by commit LSN against the durable position, and records
//     are ordered by [Position] (commit LSN, sequence in transaction), never by a per-row LSN.
//   - A heartbeat ([Config.HeartbeatInterval], pg_logical_emit_message) lets an idle slot
//     advance; the slot's lag is the tarn_cdc_slot_lag_bytes metric.
//   - The local row state is used only when its recorded position equals the position in
//     Kafka ([ErrToastMissing] otherwise, never a guessed value).
//   - An error that needs an operator ([IsPermanent]: credentials, privileges, wal_level,
//     tables, publication, slot) says what was wrong and the statement or setting that fixes
//     it, and is found by the server's SQLSTATE, never by its text; callers retry the others.
package cdc
