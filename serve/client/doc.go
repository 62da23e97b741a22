// Package client owns reading tarn's view API from a Go program that writes and then reads
// its own writes: [Client.Get] reads one key and, given where the write went ([AfterLSN] for
// a Postgres commit, [AfterRecord] for a record produced to Kafka), waits on the server until
// the view has applied it. It depends on the standard library only, so that a service links
// neither tarn's server nor a Kafka or Postgres client through it.
//
//	if _, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance - 10 WHERE id = 7`); err != nil { … }
//	// commit, then, on the same connection:
//	var lsn client.LSN
//	err = conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()`).Scan(&lsn)
//	rd, err := c.Get(ctx, "balances", "7", client.AfterLSN(lsn))
//
// With franz-go, after r was produced: client.AfterRecord(r.Topic, r.Partition, r.Offset).
//
// # Invariants
//
//   - A [Read] is at least as new as every write its options named: the server answered only
//     once the view had applied them. If it could not within the wait, Get returns a
//     [*Problem] for which errors.Is(err, [ErrNotCaughtUp]) holds, with the server's
//     Retry-After and the position the view had reached.
//   - [Position.LSN], when the view is fed by CDC, is a Postgres LSN up to which the view has
//     applied every write; a write at or below it is in the answer.
//   - The client never retries: what to do on a 503 (retry, wait longer, give up) is the
//     caller's decision.
package client
