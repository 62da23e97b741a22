package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Txn is a write set over any number of store partitions, filled while a batch of input
// records is processed and committed in two phases:
//
//  1. [Txn.Produce] sends the pending writes as changelog records (key = store key, delete =
//     tombstone, partition = store partition) with the caller's client and learns their
//     offsets. If the caller began a Kafka transaction on the client, the records are part of
//     it: Produce never begins or ends transactions.
//  2. Once Kafka made them durable (acks for at-least-once, a committed transaction for
//     exactly-once), [Txn.Apply] writes the data and the offsets it reaches in one Pebble
//     batch, without fsync: the changelog is the durability.
//
// Reads through the Txn (pass it as the [Reader]) see its pending writes over the applied
// state. Within one Txn only the last write of each key is produced.
//
// A crash between the phases leaves local state behind the changelog; [DB.Restore] catches
// it up. So does a failed Produce, which may have written some records: Discard the Txn and
// Restore the partitions before writing to them again. A Txn is not safe for concurrent use.
type Txn struct {
	db    *DB
	b     *pebble.Batch
	parts map[string]*txnPart
	order []*txnPart
	state txnState
	buf   []byte
}

type txnState int

const (
	txnOpen txnState = iota
	txnProduced
	txnFailed
	txnDone
)

// txnPart is the pending state of one store partition.
type txnPart struct {
	p     *part
	win   *Window // nil for a KV
	recs  []*kgo.Record
	slab  []kgo.Record   // preallocated records for the next writes
	index map[string]int // changelog key → position in recs
	// streamTime of a windowed partition, including pending writes.
	streamTime    int64
	hasStreamTime bool
	timeChanged   bool
	// lastOffset is the highest offset acknowledged by Produce (-1 before).
	lastOffset int64
}

// NewTxn starts an empty write set.
func (db *DB) NewTxn() *Txn {
	return &Txn{db: db, b: db.pdb.NewIndexedBatch(), parts: make(map[string]*txnPart)}
}

func (t *Txn) pebbleReader() pebble.Reader { return t.b }

// storeKey builds p's data key for key in a buffer reused by every write (the batch copies).
func (t *Txn) storeKey(p *part, key []byte) []byte {
	t.buf = append(append(t.buf[:0], p.data...), key...)
	return t.buf
}
func (t *Txn) pendingTxn() *Txn { return t }

// Len is the number of changelog records Produce will send (one per written key).
func (t *Txn) Len() int {
	n := 0
	for _, tp := range t.order {
		n += len(tp.recs)
	}
	return n
}

func (t *Txn) part(p *part, win *Window) (*txnPart, error) {
	if tp := t.parts[string(p.ns)]; tp != nil {
		return tp, nil
	}
	tp := &txnPart{p: p, win: win, index: make(map[string]int), lastOffset: -1}
	if win != nil {
		st, ok, err := readStreamTime(t.db.pdb, p)
		if err != nil {
			return nil, err
		}
		tp.streamTime, tp.hasStreamTime = st, ok
	}
	t.parts[string(p.ns)] = tp
	t.order = append(t.order, tp)
	return tp, nil
}

// write stages a put (value non-nil) or delete (value nil) of storeKey, logged under clKey.
func (t *Txn) write(p *part, storeKey, clKey, value []byte) error {
	if t.state != txnOpen {
		return fmt.Errorf("%w: write after Produce, Apply or Discard", ErrTxnState)
	}
	tp, err := t.part(p, nil)
	if err != nil {
		return err
	}
	return t.stage(tp, storeKey, clKey, value)
}

func (t *Txn) stage(tp *txnPart, storeKey, clKey, value []byte) error {
	var err error
	if value == nil {
		err = t.b.Delete(storeKey, nil)
	} else {
		tp.p.filter.add(storeKey) // before Apply can make the key visible
		err = t.b.Set(storeKey, value, nil)
	}
	if err != nil {
		return fmt.Errorf("state: %s: stage write: %w", tp.p.id, err)
	}
	tp.log(clKey, value)
	return nil
}

// log records the changelog record of a write, replacing an earlier one of the same key.
// Records come from slabs and key and value share one copy: this is the per-write cost of a
// Txn.
func (tp *txnPart) log(clKey, value []byte) {
	if i, ok := tp.index[string(clKey)]; ok {
		if value != nil {
			value = append([]byte{}, value...)
		}
		tp.recs[i].Value = value
		return
	}
	buf := make([]byte, len(clKey)+len(value))
	key := buf[:len(clKey):len(clKey)]
	copy(key, clKey)
	var val []byte
	if value != nil {
		val = buf[len(clKey):]
		copy(val, value)
	}
	if len(tp.slab) == 0 {
		tp.slab = make([]kgo.Record, min(max(len(tp.recs), 16), 1024))
	}
	r := &tp.slab[0]
	tp.slab = tp.slab[1:]
	*r = kgo.Record{Topic: tp.p.topic, Partition: tp.p.id.Partition, Key: key, Value: val}
	// The key is our own copy and never changes, so the map may share its bytes.
	tp.index[unsafe.String(unsafe.SliceData(key), len(key))] = len(tp.recs)
	tp.recs = append(tp.recs, r)
}

func (t *Txn) writeWindow(w *Window, key []byte, startMs int64, value []byte) error {
	if t.state != txnOpen {
		return fmt.Errorf("%w: write after Produce, Apply or Discard", ErrTxnState)
	}
	tp, err := t.part(w.p, w)
	if err != nil {
		return err
	}
	if startMs < w.cutoff(tp.streamTime, tp.hasStreamTime) {
		if value == nil {
			return nil // already gone
		}
		return fmt.Errorf("%w: %s: window starting %d ms is older than stream time %d ms minus size+grace+retention",
			ErrExpired, w.p.id, startMs, tp.streamTime)
	}
	if value != nil && (!tp.hasStreamTime || startMs > tp.streamTime) {
		tp.streamTime, tp.hasStreamTime, tp.timeChanged = startMs, true, true
	}
	return t.stage(tp, w.storeKey(nil, key, startMs), appendWindowChangelogKey(nil, key, startMs), value)
}

// expire range-deletes the windowed partition's fully expired segments and tombstones their
// windows in the changelog, so that compaction removes them there too.
func (t *Txn) expire(tp *txnPart) error {
	if !tp.hasStreamTime {
		return nil
	}
	w := tp.win
	c := w.cutoff(tp.streamTime, true)
	lo, hi := w.p.data, w.segmentBound(floorDiv(c, w.segMs))
	it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("state: %s: expire: %w", w.p.id, err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		key, start, err := w.decodeStoreKey(it.Key())
		if err != nil {
			return errors.Join(err, it.Close())
		}
		tp.log(appendWindowChangelogKey(nil, key, start), nil)
		n++
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("state: %s: expire: %w", w.p.id, err)
	}
	if n == 0 {
		return nil
	}
	if err := t.b.DeleteRange(lo, hi, nil); err != nil {
		return fmt.Errorf("state: %s: expire: %w", w.p.id, err)
	}
	t.db.log.Debug("state: expired windows", "store", w.p.id.String(), "windows", n, "before_ms", c)
	return nil
}

// Produce expires old windows, then sends every pending write to its changelog with cl and
// waits for the acknowledgements. cl must honour Record.Partition, e.g. be built with
// kgo.RecordPartitioner(kgo.ManualPartitioner()); records that land elsewhere fail with
// ErrPartitioner. With a Kafka transaction begun on cl, "acknowledged" means "in the
// transaction": call Apply only after it commits.
func (t *Txn) Produce(ctx context.Context, cl *kgo.Client) error {
	if t.state != txnOpen {
		return fmt.Errorf("%w: Produce called twice or after Discard", ErrTxnState)
	}
	for _, tp := range t.order {
		if tp.win == nil {
			continue
		}
		if err := t.expire(tp); err != nil {
			t.state = txnFailed
			return err
		}
	}
	if err := t.send(ctx, cl); err != nil {
		t.state = txnFailed
		return err
	}
	// The offsets reached are staged now, so that reads through the Txn (Offset) see the
	// position its writes will have once applied.
	for _, tp := range t.order {
		if err := t.applyMeta(tp); err != nil {
			t.state = txnFailed
			return err
		}
	}
	t.state = txnProduced
	return nil
}

func (t *Txn) send(ctx context.Context, cl *kgo.Client) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, tp := range t.order {
		for _, r := range tp.recs {
			wg.Add(1)
			cl.Produce(ctx, r, func(r *kgo.Record, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, fmt.Errorf("%s: %w", r.Topic, err))
				case r.Partition != tp.p.id.Partition:
					errs = append(errs, fmt.Errorf("%w: record for %s went to partition %d", ErrPartitioner, tp.p.id, r.Partition))
				default:
					tp.lastOffset = max(tp.lastOffset, r.Offset)
				}
			})
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("state: produce changelog: %d of %d records failed: %w", len(errs), t.Len(), errors.Join(dedupe(errs)...))
	}
	for _, tp := range t.order {
		t.db.metrics.produced.WithLabelValues(tp.p.topic).Add(float64(len(tp.recs)))
	}
	return nil
}

// dedupe keeps the first of each distinct error message, so a broker outage is reported
// once, not once per record.
func dedupe(errs []error) []error {
	seen := make(map[string]bool)
	var out []error
	for _, err := range errs {
		if !seen[err.Error()] {
			seen[err.Error()] = true
			out = append(out, err)
		}
	}
	return out
}

// ChangelogOffset returns the changelog offset of the record Produce sent for key in s (for
// a Window, the key of one window: see [Window.ChangelogKey]), and false when the Txn wrote
// no such key or Produce has not succeeded. Each written key has one record, so the offsets
// of a Txn's keys are distinct and give its writes a total order per partition.
func (t *Txn) ChangelogOffset(s Store, key []byte) (int64, bool) {
	if t.state != txnProduced && t.state != txnDone {
		return 0, false
	}
	tp := t.parts[string(s.handle().ns)]
	if tp == nil {
		return 0, false
	}
	i, ok := tp.index[string(key)]
	if !ok {
		return 0, false
	}
	return tp.recs[i].Offset, true
}

// Apply writes the pending data and the changelog offsets it reaches in one Pebble batch.
// Call it only after Produce succeeded and Kafka made the records durable.
func (t *Txn) Apply() error {
	if t.state != txnProduced {
		return fmt.Errorf("%w: Apply needs a successful Produce first", ErrTxnState)
	}
	t.state = txnDone
	defer t.b.Close()
	if err := t.b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("state: apply: %w", err)
	}
	return nil
}

func (t *Txn) applyMeta(tp *txnPart) error {
	if tp.lastOffset >= 0 {
		if err := tp.p.setOffset(t.b, tp.lastOffset); err != nil {
			return fmt.Errorf("state: %s: apply offset: %w", tp.p.id, err)
		}
	}
	if tp.timeChanged {
		if err := setStreamTime(t.b, tp.p, tp.streamTime); err != nil {
			return err
		}
	}
	return nil
}

// Discard drops the pending writes. It is a no-op after Apply or a previous Discard.
func (t *Txn) Discard() {
	if t.state == txnDone {
		return
	}
	t.state = txnDone
	_ = t.b.Close() // closing an uncommitted batch only releases memory
}
