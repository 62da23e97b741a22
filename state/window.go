package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// WindowOptions define a windowed store's windows and how long they are kept. Window starts
// are kept to the millisecond.
type WindowOptions struct {
	// Size is the length of a window; a window [start, start+Size). Required, at least 1 ms.
	Size time.Duration
	// Grace is how long after its end a window still accepts late records. Default 0.
	Grace time.Duration
	// Retention is how long after end+grace a closed window stays readable. Default 0.
	Retention time.Duration
	// SegmentInterval is the span of window starts that retention drops at once with one
	// range delete. Default: (Size+Grace+Retention)/2, at least 1 ms. Windows are invisible to
	// reads as soon as they expire; their segment is deleted once all of it has expired.
	SegmentInterval time.Duration
}

func (o WindowOptions) withDefaults() WindowOptions {
	if o.SegmentInterval == 0 {
		o.SegmentInterval = max((o.Size+o.Grace+o.Retention)/2, time.Millisecond)
	}
	return o
}

// Validate reports every problem of the options (after defaults) at once.
func (o WindowOptions) Validate() error {
	var errs []error
	if o.Size < time.Millisecond {
		errs = append(errs, fmt.Errorf("window Size %v is below 1ms", o.Size))
	}
	if o.Grace < 0 {
		errs = append(errs, fmt.Errorf("window Grace %v is negative", o.Grace))
	}
	if o.Retention < 0 {
		errs = append(errs, fmt.Errorf("window Retention %v is negative", o.Retention))
	}
	if o.SegmentInterval < time.Millisecond {
		errs = append(errs, fmt.Errorf("window SegmentInterval %v is below 1ms", o.SegmentInterval))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return nil
}

// Window is a handle on one windowed store partition: (key, window start) → value. Its
// stream time is the largest window start ever written to it; a window expires (reads stop
// seeing it, writes to it fail with ErrExpired) once stream time reaches its
// end + Grace + Retention. Expired segments are range-deleted and their windows tombstoned
// in the changelog by the next [Txn.Produce] that writes to the partition, so the compacted
// changelog stays bounded. A Window is safe for concurrent use.
type Window struct {
	p       *part
	opts    WindowOptions
	totalMs int64 // Size+Grace+Retention
	segMs   int64
}

// Window returns the handle of a windowed store partition.
func (db *DB) Window(id ID, o WindowOptions) (*Window, error) {
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("state: %s: %w", id, err)
	}
	p, err := db.register(id, storeDef{kind: kindWin, win: o})
	if err != nil {
		return nil, err
	}
	return &Window{
		p:       p,
		opts:    o,
		totalMs: (o.Size + o.Grace + o.Retention).Milliseconds(),
		segMs:   o.SegmentInterval.Milliseconds(),
	}, nil
}

// ID names the store partition.
func (w *Window) ID() ID { return w.p.id }

func (w *Window) handle() *part { return w.p }

// ChangelogKey is the changelog key of key's window starting at start, as
// [Txn.ChangelogOffset] takes it.
func (w *Window) ChangelogKey(key []byte, start time.Time) []byte {
	return appendWindowChangelogKey(nil, key, start.UnixMilli())
}

// Offset returns the changelog offset whose effects r contains, and false when nothing was
// applied yet.
func (w *Window) Offset(r Reader) (int64, bool, error) {
	return w.p.offset(r.pebbleReader())
}

// StreamTime returns the largest window start written to the store as r sees it, and false
// when the store is empty.
func (w *Window) StreamTime(r Reader) (time.Time, bool, error) {
	ms, ok, err := w.streamTime(r)
	if err != nil || !ok {
		return time.Time{}, false, err
	}
	return time.UnixMilli(ms), true, nil
}

func (w *Window) streamTime(r Reader) (int64, bool, error) {
	if t := r.pendingTxn(); t != nil {
		// The Txn reads it once and keeps it with the partition's pending writes.
		tp, err := t.part(w.p, w)
		if err != nil {
			return 0, false, err
		}
		return tp.streamTime, tp.hasStreamTime, nil
	}
	return readStreamTime(r.pebbleReader(), w.p)
}

func readStreamTime(r pebble.Reader, p *part) (int64, bool, error) {
	v, ok, err := getCopy(r, p.metaStreamTimeKey)
	if err != nil || !ok {
		return 0, false, err
	}
	if len(v) != 8 {
		return 0, false, fmt.Errorf("state: %s: stream time record has %d bytes, want 8; drop the partition (DropPartition) and restore", p.id, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

// cutoff is the smallest window start that has not expired at stream time st.
func (w *Window) cutoff(st int64, ok bool) int64 {
	if !ok {
		return math.MinInt64
	}
	return saturatingAdd(st, 1-w.totalMs)
}

func (w *Window) readCutoff(r Reader) (int64, error) {
	st, ok, err := w.streamTime(r)
	return w.cutoff(st, ok), err
}

// storeKey appends the Pebble key of a window to b: data | segment of start | esc(key) | start.
func (w *Window) storeKey(b, key []byte, startMs int64) []byte {
	b = append(b, w.p.data...)
	b = appendOrderedInt64(b, floorDiv(startMs, w.segMs))
	b = appendEscaped(b, key)
	return appendOrderedInt64(b, startMs)
}

// segmentBound returns data | segment, the first key of a segment.
func (w *Window) segmentBound(seg int64) []byte {
	return appendOrderedInt64(append([]byte(nil), w.p.data...), seg)
}

// decodeStoreKey splits a Pebble key of this store into store key and window start.
func (w *Window) decodeStoreKey(k []byte) ([]byte, int64, error) {
	rest := k[len(w.p.data):]
	if len(rest) < 8 {
		return nil, 0, fmt.Errorf("state: %s: windowed key too short", w.p.id)
	}
	key, tail, err := decodeEscaped(rest[8:])
	if err != nil {
		return nil, 0, err
	}
	if len(tail) != 8 {
		return nil, 0, fmt.Errorf("state: %s: windowed key has %d bytes after the key, want 8", w.p.id, len(tail))
	}
	return key, decodeOrderedInt64(tail), nil
}

// Get returns a copy of the value of the window of key starting at start, and false when it
// is absent or expired.
func (w *Window) Get(r Reader, key []byte, start time.Time) ([]byte, bool, error) {
	ms := start.UnixMilli()
	c, err := w.readCutoff(r)
	if err != nil || ms < c {
		return nil, false, err
	}
	return w.p.get(r, w.storeKey(nil, key, ms))
}

// Put sets the window of key starting at start to value in t. A nil value is stored as an
// empty one. It returns ErrExpired, and writes nothing, if the window has expired.
func (w *Window) Put(t *Txn, key []byte, start time.Time, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	return t.writeWindow(w, key, start.UnixMilli(), value)
}

// Delete removes the window of key starting at start in t; deleting an expired window does
// nothing.
func (w *Window) Delete(t *Txn, key []byte, start time.Time) error {
	return t.writeWindow(w, key, start.UnixMilli(), nil)
}

// Fetch iterates the unexpired windows of key whose start is in [from, to], in start order.
// Empty segments cost one seek each, not a scan.
func (w *Window) Fetch(r Reader, key []byte, from, to time.Time) (*WindowIter, error) {
	c, err := w.readCutoff(r)
	if err != nil {
		return nil, err
	}
	fromMs, toMs := max(from.UnixMilli(), c), to.UnixMilli()
	it, err := w.newIter(r, fromMs, toMs)
	if err != nil {
		return nil, err
	}
	return &WindowIter{w: w, it: it, key: key, esc: appendEscaped(nil, key), from: fromMs, to: toMs,
		seg: floorDiv(fromMs, w.segMs), empty: fromMs > toMs}, nil
}

// FetchAll iterates every unexpired window whose start is in [from, to]. Windows come
// segment by segment (segments in time order), and within a segment ordered by key, then
// start: collect and sort them if a global time order is needed.
func (w *Window) FetchAll(r Reader, from, to time.Time) (*WindowIter, error) {
	c, err := w.readCutoff(r)
	if err != nil {
		return nil, err
	}
	fromMs, toMs := max(from.UnixMilli(), c), to.UnixMilli()
	it, err := w.newIter(r, fromMs, toMs)
	if err != nil {
		return nil, err
	}
	return &WindowIter{w: w, it: it, all: true, from: fromMs, to: toMs, empty: fromMs > toMs}, nil
}

// newIter opens an iterator over the segments that can hold starts in [fromMs, toMs].
func (w *Window) newIter(r Reader, fromMs, toMs int64) (*pebble.Iterator, error) {
	lower := w.segmentBound(floorDiv(fromMs, w.segMs))
	upper := w.segmentBound(floorDiv(toMs, w.segMs) + 1)
	if toMs < fromMs || floorDiv(toMs, w.segMs) == math.MaxInt64 {
		upper = prefixEnd(w.p.data)
	}
	it, err := r.pebbleReader().NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("state: %s: new iterator: %w", w.p.id, err)
	}
	return it, nil
}

// WindowIter walks windows:
//
//	for it.Next() { use(it.Key(), it.Start(), it.Value()) }
//	err := it.Close()
//
// Key and Value are valid until the next call to Next.
type WindowIter struct {
	w        *Window
	it       *pebble.Iterator
	all      bool // FetchAll: every key; else only key
	key, esc []byte
	from, to int64
	seg      int64 // Fetch: the segment being read
	empty    bool
	started  bool
	done     bool
	curKey   []byte
	curStart int64
	err      error
}

// Next moves to the next window and reports whether there is one.
func (i *WindowIter) Next() bool {
	if i.empty || i.done || i.err != nil {
		return false
	}
	var ok bool
	if i.all {
		ok = i.nextAll()
	} else {
		ok = i.nextOfKey()
	}
	if !ok {
		i.done = true
	}
	return ok
}

func (i *WindowIter) nextAll() bool {
	ok := i.advance(func() bool { return i.it.First() })
	for ; ok; ok = i.it.Next() {
		key, start, err := i.w.decodeStoreKey(i.it.Key())
		if err != nil {
			i.err = err
			return false
		}
		if start >= i.from && start <= i.to {
			i.curKey, i.curStart = key, start
			return true
		}
	}
	return false
}

// nextOfKey reads key's windows segment by segment, seeking over the segments' other keys.
func (i *WindowIter) nextOfKey() bool {
	ok := i.advance(func() bool { return i.it.SeekGE(i.seekKey()) })
	for ok {
		rest := i.it.Key()[len(i.w.p.data):]
		if seg := decodeOrderedInt64(rest[:8]); seg != i.seg {
			// Landed in a later segment: look for key's windows there.
			i.seg = seg
			ok = i.it.SeekGE(i.seekKey())
			continue
		}
		if tail := rest[8:]; bytes.HasPrefix(tail, i.esc) && len(tail) == len(i.esc)+8 {
			start := decodeOrderedInt64(tail[len(i.esc):])
			if start > i.to {
				return false
			}
			i.curKey, i.curStart = i.key, start
			return true
		}
		// Past key's windows in this segment.
		i.seg++
		ok = i.it.SeekGE(i.seekKey())
	}
	return false
}

func (i *WindowIter) advance(first func() bool) bool {
	if !i.started {
		i.started = true
		return first()
	}
	return i.it.Next()
}

func (i *WindowIter) seekKey() []byte {
	b := append([]byte(nil), i.w.p.data...)
	b = appendOrderedInt64(b, i.seg)
	b = append(b, i.esc...)
	return appendOrderedInt64(b, i.from)
}

// Key is the store key of the current window.
func (i *WindowIter) Key() []byte { return i.curKey }

// Start is the start of the current window.
func (i *WindowIter) Start() time.Time { return time.UnixMilli(i.curStart) }

// Value is the value of the current window; a read error ends the iteration.
func (i *WindowIter) Value() []byte {
	v, _ := i.it.ValueAndErr()
	return v
}

// Err returns the error that ended the iteration, if any.
func (i *WindowIter) Err() error {
	if i.err != nil {
		return i.err
	}
	return i.it.Error()
}

// Close releases the iterator and returns the error that ended the iteration, if any.
func (i *WindowIter) Close() error {
	err := i.Err()
	if cerr := i.it.Close(); err == nil {
		err = cerr
	}
	return err
}

// setStreamTime writes a windowed partition's stream time into b.
func setStreamTime(b *pebble.Batch, p *part, ms int64) error {
	if err := b.Set(p.metaStreamTimeKey, binary.BigEndian.AppendUint64(nil, uint64(ms)), nil); err != nil {
		return fmt.Errorf("state: %s: apply stream time: %w", p.id, err)
	}
	return nil
}
