package cdc

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// snapshot creates the slot with an exported snapshot and writes every table as of that
// snapshot: changes committed before the slot's consistent point are in the snapshot, later
// ones come from the stream, none in both. Each table starts with truncate markers so that a
// repeated snapshot (after a crash during one, or of a fresh slot) leaves no stale rows. The
// position is written only after the last row: a crash in between starts the snapshot over.
func (r *runner) snapshot(ctx context.Context) error {
	res, err := pglogrepl.CreateReplicationSlot(ctx, r.repl, r.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "EXPORT_SNAPSHOT"})
	if pgCode(err) == codeDuplicateObject {
		// Another instance created the slot a moment ago and takes the snapshot.
		return fmt.Errorf("%w: %s was created by another connection: %w", ErrSlotBusy, r.cfg.Slot, err)
	}
	switch pgCode(err) {
	case "":
	case codeObjectNotInPrereq:
		return faultf(ErrWalLevel, err, "cdc: Postgres cannot create logical slot %s: run ALTER SYSTEM SET wal_level = logical (or set it in postgresql.conf) and restart Postgres", r.cfg.Slot)
	case codeInsufficientPriv:
		return r.classifyStream(err)
	}
	if err != nil {
		return fmt.Errorf("cdc: create replication slot %s: %w", r.cfg.Slot, err)
	}
	cp, err := ParseLSN(res.ConsistentPoint)
	if err != nil {
		return fmt.Errorf("cdc: consistent point of slot %s: %w", r.cfg.Slot, err)
	}
	conn, err := connect(ctx, r.cfg.PostgresURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("cdc: begin snapshot transaction: %w", err)
	}
	defer tx.Rollback(context.Background())
	// The exported snapshot lives until the replication connection's next command; importing
	// it first keeps it for this transaction.
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(res.SnapshotName)); err != nil {
		return fmt.Errorf("cdc: import snapshot %s: %w", res.SnapshotName, err)
	}
	r.log.Info("cdc: snapshot started", "consistent_point", cp, "tables", len(r.tables))
	if err := r.rows.reset(); err != nil {
		return err
	}
	h := newTxnHeaders(cp, 0, time.Now())
	var seq uint64
	for _, t := range r.tables {
		if err := r.snapshotTable(ctx, tx, t, h, &seq); err != nil {
			return err
		}
	}
	pos := position{Resume: cp, Commit: cp, SystemID: r.sys.SystemID, Timeline: r.sys.Timeline}
	if err := r.sink.commit(ctx, &pos); err != nil {
		return err
	}
	if err := r.rows.commit(&pos); err != nil {
		return err
	}
	r.pos = pos
	r.log.Info("cdc: snapshot done", "rows", seq)
	return nil
}

func (r *runner) snapshotTable(ctx context.Context, tx pgx.Tx, t *table, h txnHeaders, seq *uint64) error {
	for _, m := range h.truncateMarkers(t, seq) {
		if err := r.sink.add(ctx, m); err != nil {
			return err
		}
	}
	var estimate int64
	if err := tx.QueryRow(ctx, "SELECT greatest(reltuples, 0)::int8 FROM pg_class WHERE oid = $1", t.oid).Scan(&estimate); err != nil {
		return fmt.Errorf("cdc: estimate rows of %s: %w", t.qualified, err)
	}
	if _, err := tx.Exec(ctx, "DECLARE tarn_snapshot NO SCROLL CURSOR FOR SELECT "+t.selectList()+" FROM "+t.ident()); err != nil {
		return fmt.Errorf("cdc: snapshot %s: %w", t.qualified, err)
	}
	keyIdx := t.keyIndexes()
	fetch := "FETCH FORWARD " + strconv.Itoa(r.cfg.SnapshotChunkRows) + " FROM tarn_snapshot"
	start, rows := time.Now(), int64(0)
	counter := r.m.snapshotRows.WithLabelValues(t.qualified)
	for {
		n, err := r.snapshotChunk(ctx, tx, fetch, t, keyIdx, h, seq)
		if err != nil {
			return fmt.Errorf("cdc: snapshot %s: %w", t.qualified, err)
		}
		rows += n
		counter.Add(float64(n))
		elapsed := time.Since(start)
		r.log.Info("cdc: snapshot progress", "table", t.qualified, "rows", rows, "estimated_rows", estimate,
			"rows_per_second", int64(float64(rows)/max(elapsed.Seconds(), 1e-3)))
		if n < int64(r.cfg.SnapshotChunkRows) {
			break
		}
	}
	if _, err := tx.Exec(ctx, "CLOSE tarn_snapshot"); err != nil {
		return fmt.Errorf("cdc: snapshot %s: %w", t.qualified, err)
	}
	return nil
}

// snapshotChunk writes one FETCH worth of rows. Values are read in text format, the same as
// pgoutput sends, so both paths share one conversion.
func (r *runner) snapshotChunk(ctx context.Context, tx pgx.Tx, fetch string, t *table, keyIdx []int, h txnHeaders, seq *uint64) (int64, error) {
	rr := tx.Conn().PgConn().ExecParams(ctx, fetch, nil, nil, nil, []int16{pgx.TextFormatCode})
	vals := make([]value, len(t.columns))
	var n int64
	var err error
	for rr.NextRow() && err == nil {
		for i, v := range rr.Values() {
			vals[i] = value{text: v, null: v == nil}
		}
		err = r.snapshotRow(ctx, t, keyIdx, vals, h, seq)
		n++
	}
	if _, cerr := rr.Close(); err == nil {
		err = cerr
	}
	if err == nil && r.sink.records >= r.cfg.BatchRecords {
		// Bound the Kafka transaction; the snapshot is confirmed only by the final position.
		err = r.sink.commit(ctx, nil)
	}
	return n, err
}

func (r *runner) snapshotRow(ctx context.Context, t *table, keyIdx []int, vals []value, h txnHeaders, seq *uint64) error {
	key, err := keyOf(keyIdx, t.fullKey, t.columns, vals)
	if err != nil {
		return err
	}
	row, err := appendRow(nil, t.columns, vals)
	if err != nil {
		return err
	}
	if err := r.sink.add(ctx, h.record(t.topic, t.partitions, key, row, OpSnapshot, *seq)); err != nil {
		return err
	}
	*seq++
	return r.rows.set(t.qualified, key, row)
}

func (t *table) keyIndexes() []int {
	var idx []int
	for i, c := range t.columns {
		if c.key {
			idx = append(idx, i)
		}
	}
	return idx
}

func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}
