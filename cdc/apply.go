package cdc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
)

// relation is a table as the stream's last Relation message described it.
type relation struct {
	t            *table // nil: a table of the publication that the source does not replicate
	cols         []column
	keyIdx       []int
	identityFull bool
	counters     map[Op]prometheus.Counter
}

// applier turns the stream's messages into records, in batches of whole transactions.
type applier struct {
	r    *runner
	st   *streamState
	rels map[uint32]*relation

	inTxn   bool
	skip    bool // the transaction is already durable (the server sent it again)
	hdr     txnHeaders
	seq     uint64
	pending *position // the batch's position once confirmed, nil when the batch is empty
	started time.Time // when the batch got its first content
	open    bool
}

func newApplier(r *runner, st *streamState) *applier {
	return &applier{r: r, st: st, rels: map[uint32]*relation{}}
}

// run applies the stream's messages. A batch closes BatchInterval after it got its first
// content (at the first transaction end after that): a timer armed for that moment, not a
// ticker, whose phase would add up to another interval to every change's way to Kafka. While
// a transaction is open no timer is needed: its commit message wakes the loop.
func (a *applier) run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	armed := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-a.st.msgs:
			if err := a.handle(ctx, m); err != nil {
				return err
			}
		case <-timer.C:
			armed = false
		}
		if err := a.maybeCommit(ctx); err != nil {
			return err
		}
		if a.open && !a.inTxn && a.pending != nil && !armed {
			timer.Reset(time.Until(a.started.Add(a.r.cfg.BatchInterval)))
			armed = true
		}
	}
}

func (a *applier) touch() {
	if !a.open {
		a.open, a.started = true, time.Now()
	}
}

// maybeCommit closes the batch between transactions once it is big or old enough.
func (a *applier) maybeCommit(ctx context.Context) error {
	if a.inTxn || a.pending == nil {
		return nil
	}
	if a.r.sink.records < a.r.cfg.BatchRecords && time.Since(a.started) < a.r.cfg.BatchInterval {
		return nil
	}
	start := time.Now()
	p := *a.pending
	p.SystemID, p.Timeline = a.r.sys.SystemID, a.r.sys.Timeline
	if err := a.r.sink.commit(ctx, &p); err != nil {
		return err
	}
	if err := a.r.rows.commit(&p); err != nil {
		return err
	}
	a.r.pos, a.pending, a.open = p, nil, false
	a.st.durable.Store(uint64(p.Resume))
	a.st.poke()
	a.r.m.batches.Inc()
	a.r.m.batchSeconds.Observe(time.Since(start).Seconds())
	return nil
}

// latest is the newest position of the stream so far, durable or pending.
func (a *applier) latest() position {
	if a.pending != nil {
		return *a.pending
	}
	return a.r.pos
}

func (a *applier) handle(ctx context.Context, m pglogrepl.Message) error {
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		return a.relation(ctx, m)
	case *pglogrepl.BeginMessage:
		a.begin(m)
	case *pglogrepl.CommitMessage:
		a.commit(m)
	case *pglogrepl.InsertMessage:
		return a.change(ctx, m.RelationID, func(rel *relation) error { return a.insert(ctx, rel, m) })
	case *pglogrepl.UpdateMessage:
		return a.change(ctx, m.RelationID, func(rel *relation) error { return a.update(ctx, rel, m) })
	case *pglogrepl.DeleteMessage:
		return a.change(ctx, m.RelationID, func(rel *relation) error { return a.delete(ctx, rel, m) })
	case *pglogrepl.TruncateMessage:
		return a.truncate(ctx, m)
	case *pglogrepl.LogicalDecodingMessage:
		a.message(m)
	}
	return nil
}

func (a *applier) begin(m *pglogrepl.BeginMessage) {
	l := a.latest()
	a.inTxn, a.seq = true, 0
	// De-duplicate by commit LSN: a transaction at or before the durable position is written.
	a.skip = LSN(m.FinalLSN) <= l.Commit || LSN(m.FinalLSN) < l.Resume
	a.hdr = newTxnHeaders(LSN(m.FinalLSN), m.Xid, m.CommitTime)
}

func (a *applier) commit(m *pglogrepl.CommitMessage) {
	a.inTxn = false
	if a.skip {
		return
	}
	a.touch()
	a.pending = &position{Resume: LSN(m.TransactionEndLSN), Commit: LSN(m.CommitLSN)}
}

// message handles heartbeats: every transaction that committed before a non-transactional
// message was sent before it, so the stream may resume at the message's LSN.
func (a *applier) message(m *pglogrepl.LogicalDecodingMessage) {
	if m.Transactional || m.Prefix != heartbeatPrefix || a.inTxn {
		return
	}
	l := a.latest()
	if LSN(m.LSN) <= l.Resume {
		return
	}
	a.touch()
	l.Resume = LSN(m.LSN)
	a.pending = &l
}

func (a *applier) change(ctx context.Context, relID uint32, fn func(*relation) error) error {
	if !a.inTxn {
		return fmt.Errorf("%w: row change outside a transaction", ErrProtocol)
	}
	if a.skip {
		return nil
	}
	rel, ok := a.rels[relID]
	if !ok {
		return fmt.Errorf("%w: change for relation %d before its Relation message", ErrProtocol, relID)
	}
	if rel.t == nil {
		return nil
	}
	a.touch()
	return fn(rel)
}

func (a *applier) relation(ctx context.Context, m *pglogrepl.RelationMessage) error {
	rel := &relation{t: a.r.byName[m.Namespace+"."+m.RelationName], identityFull: m.ReplicaIdentity == 'f'}
	if rel.t == nil {
		a.rels[m.RelationID] = rel
		return nil
	}
	t := rel.t
	for _, c := range m.Columns {
		typ, err := a.r.types.get(ctx, c.DataType)
		if err != nil {
			return err
		}
		rel.cols = append(rel.cols, column{name: c.Name, typ: typ})
	}
	keyNames := t.keyNames
	if t.fullKey {
		keyNames = nil
		for _, c := range rel.cols {
			keyNames = append(keyNames, c.name)
		}
	}
	for i := range rel.cols {
		if slices.Contains(keyNames, rel.cols[i].name) {
			rel.cols[i].key = true
			rel.keyIdx = append(rel.keyIdx, i)
		}
	}
	if len(rel.keyIdx) != len(keyNames) {
		return fmt.Errorf("cdc: table %s no longer has all of its key columns %v; restart the source to re-read its key", t.qualified, keyNames)
	}
	if old, ok := a.rels[m.RelationID]; ok && !sameColumns(old.cols, rel.cols) {
		a.r.log.Info("cdc: table schema changed", "table", t.qualified, "columns", columnNames(rel.cols))
	}
	rel.counters = map[Op]prometheus.Counter{}
	for _, op := range []Op{OpInsert, OpUpdate, OpDelete, OpTruncate} {
		rel.counters[op] = a.r.m.changes.WithLabelValues(t.qualified, string(op))
	}
	a.rels[m.RelationID] = rel
	return nil
}

func sameColumns(a, b []column) bool {
	return slices.EqualFunc(a, b, func(x, y column) bool { return x.name == y.name && x.typ.OID == y.typ.OID })
}

func columnNames(cols []column) []string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	return names
}

// values reads a tuple; unchanged TOAST columns are left for the caller to fill.
func (rel *relation) values(tuple *pglogrepl.TupleData) ([]value, []int, error) {
	if tuple == nil || len(tuple.Columns) != len(rel.cols) {
		return nil, nil, fmt.Errorf("%w: tuple of %s does not match its Relation message", ErrProtocol, rel.t.qualified)
	}
	vals := make([]value, len(rel.cols))
	var unchanged []int
	for i, c := range tuple.Columns {
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull:
			vals[i].null = true
		case pglogrepl.TupleDataTypeText:
			vals[i].text = c.Data
		case pglogrepl.TupleDataTypeToast:
			unchanged = append(unchanged, i)
		default:
			return nil, nil, fmt.Errorf("%w: column %s of %s in format %q", ErrProtocol, rel.cols[i].name, rel.t.qualified, c.DataType)
		}
	}
	return vals, unchanged, nil
}

func (a *applier) emit(ctx context.Context, rel *relation, key, row []byte, op Op) error {
	t := rel.t
	if err := a.r.sink.add(ctx, a.hdr.record(t.topic, t.partitions, key, row, op, a.seq)); err != nil {
		return err
	}
	a.seq++
	rel.counters[op].Inc()
	if row == nil {
		return a.r.rows.del(t.qualified, key)
	}
	return a.r.rows.set(t.qualified, key, row)
}

func (a *applier) insert(ctx context.Context, rel *relation, m *pglogrepl.InsertMessage) error {
	vals, unchanged, err := rel.values(m.Tuple)
	if err != nil {
		return err
	}
	if len(unchanged) > 0 {
		return fmt.Errorf("%w: insert into %s has unchanged TOAST columns", ErrProtocol, rel.t.qualified)
	}
	return a.upsert(ctx, rel, vals, OpInsert)
}

func (a *applier) upsert(ctx context.Context, rel *relation, vals []value, op Op) error {
	key, err := keyOf(rel.keyIdx, rel.t.fullKey, rel.cols, vals)
	if err != nil {
		return fmt.Errorf("cdc: %s: %w", rel.t.qualified, err)
	}
	row, err := appendRow(nil, rel.cols, vals)
	if err != nil {
		return fmt.Errorf("cdc: %s key %q: %w", rel.t.qualified, key, err)
	}
	return a.emit(ctx, rel, key, row, op)
}

func (a *applier) update(ctx context.Context, rel *relation, m *pglogrepl.UpdateMessage) error {
	vals, unchanged, err := rel.values(m.NewTuple)
	if err != nil {
		return err
	}
	var oldKey []byte
	if m.OldTuple != nil {
		old, _, err := rel.values(m.OldTuple)
		if err != nil {
			return err
		}
		if oldKey, err = keyOf(rel.keyIdx, rel.t.fullKey, rel.cols, old); err != nil {
			return fmt.Errorf("cdc: %s: old %w", rel.t.qualified, err)
		}
		if m.OldTupleType == pglogrepl.UpdateMessageTupleTypeOld {
			unchanged = fillFromOld(vals, old, unchanged)
		}
	}
	if len(unchanged) > 0 {
		if err := a.fillFromState(rel, vals, unchanged, oldKey); err != nil {
			return err
		}
	}
	if oldKey != nil {
		newKey, err := keyOf(rel.keyIdx, rel.t.fullKey, rel.cols, vals)
		if err != nil {
			return fmt.Errorf("cdc: %s: %w", rel.t.qualified, err)
		}
		if !bytes.Equal(oldKey, newKey) {
			// The key changed: the old row is gone.
			if err := a.emit(ctx, rel, oldKey, nil, OpDelete); err != nil {
				return err
			}
		}
	}
	return a.upsert(ctx, rel, vals, OpUpdate)
}

// fillFromOld takes unchanged TOAST columns from a REPLICA IDENTITY FULL old tuple, which
// carries them in full.
func fillFromOld(vals, old []value, unchanged []int) []int {
	left := unchanged[:0]
	for _, i := range unchanged {
		if old[i].null || old[i].text != nil {
			vals[i] = old[i]
			continue
		}
		left = append(left, i)
	}
	return left
}

// fillFromState takes unchanged TOAST columns from the last row written for the key.
func (a *applier) fillFromState(rel *relation, vals []value, unchanged []int, oldKey []byte) error {
	key := oldKey
	if key == nil {
		var err error
		if key, err = keyOf(rel.keyIdx, rel.t.fullKey, rel.cols, vals); err != nil {
			return fmt.Errorf("cdc: %s: %w", rel.t.qualified, err)
		}
	}
	prev, ok, err := a.r.rows.get(rel.t.qualified, key)
	if err != nil {
		return err
	}
	var row Row
	if ok {
		if row, err = DecodeRow(prev); err != nil {
			return err
		}
	}
	for _, i := range unchanged {
		v, found := row[rel.cols[i].name]
		if !found {
			return fmt.Errorf("%w: column %s of %s key %q; the local row state in Config.Dir may have been removed: restart to rebuild it", ErrToastMissing, rel.cols[i].name, rel.t.qualified, key)
		}
		vals[i].json = json.RawMessage(v)
	}
	return nil
}

func (a *applier) delete(ctx context.Context, rel *relation, m *pglogrepl.DeleteMessage) error {
	old, _, err := rel.values(m.OldTuple)
	if err != nil {
		return err
	}
	key, err := keyOf(rel.keyIdx, rel.t.fullKey, rel.cols, old)
	if err != nil {
		return fmt.Errorf("cdc: %s: %w", rel.t.qualified, err)
	}
	return a.emit(ctx, rel, key, nil, OpDelete)
}

// truncate writes a marker to every partition of each truncated table, at the truncate's
// place in its transaction: a barrier that table stores apply as a range delete.
func (a *applier) truncate(ctx context.Context, m *pglogrepl.TruncateMessage) error {
	if !a.inTxn {
		return fmt.Errorf("%w: truncate outside a transaction", ErrProtocol)
	}
	if a.skip {
		return nil
	}
	for _, id := range m.RelationIDs {
		rel, ok := a.rels[id]
		if !ok {
			return fmt.Errorf("%w: truncate of relation %d before its Relation message", ErrProtocol, id)
		}
		if rel.t == nil {
			continue
		}
		a.touch()
		for _, r := range a.hdr.truncateMarkers(rel.t, &a.seq) {
			if err := a.r.sink.add(ctx, r); err != nil {
				return err
			}
		}
		rel.counters[OpTruncate].Inc()
		if err := a.r.rows.truncate(rel.t.qualified); err != nil {
			return err
		}
	}
	return nil
}
