package views

import (
	"fmt"
	"strconv"
	"time"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kgo"
)

type windowKind int

const (
	tumbling windowKind = iota
	hopping
	sliding
	session
)

func (k windowKind) String() string {
	return [...]string{"tumbling", "hopping", "sliding", "session"}[k]
}

// Windows says how records are grouped in time. Every kind needs an explicit grace period,
// [Windows.Grace]; there is no default, because a silent default hides late data.
type Windows struct {
	kind      windowKind
	size      time.Duration // tumbling, hopping, sliding
	advance   time.Duration // hopping
	gap       time.Duration // session
	grace     time.Duration
	graceSet  bool
	retention time.Duration
}

// DefaultRetention is how long windows stay queryable after they closed (end + grace), unless
// [Windows.Retention] says otherwise.
const DefaultRetention = 24 * time.Hour

// Tumbling windows are fixed-size, adjacent and non-overlapping: [k·size, (k+1)·size).
func Tumbling(size time.Duration) Windows {
	return Windows{kind: tumbling, size: size, advance: size, retention: DefaultRetention}
}

// Hopping windows have a fixed size and start every advance, so a record falls into
// size/advance windows.
func Hopping(size, advance time.Duration) Windows {
	return Windows{kind: hopping, size: size, advance: advance, retention: DefaultRetention}
}

// Sliding windows end at each record's time: the window of a record at t covers the key's
// records in [t-size, t]. A late record also updates the later windows that cover it. They keep
// the raw records of the last size+grace and refold a window on each update, so use them for
// small windows.
func Sliding(size time.Duration) Windows {
	return Windows{kind: sliding, size: size, retention: DefaultRetention}
}

// Session windows group a key's records separated by less than gap; a record that bridges two
// sessions merges them, so session aggregators need Merge.
func Session(gap time.Duration) Windows {
	return Windows{kind: session, gap: gap, retention: DefaultRetention}
}

// Grace sets how long after a window's end records are still accepted (0 is allowed). Records
// later than that go to the dead-letter topic.
func (w Windows) Grace(d time.Duration) Windows {
	w.grace, w.graceSet = d, true
	return w
}

// Retention sets how long windows stay in the store after end+grace (default
// [DefaultRetention]).
func (w Windows) Retention(d time.Duration) Windows {
	w.retention = d
	return w
}

func (w Windows) String() string {
	return fmt.Sprintf("%s size=%s advance=%s gap=%s grace=%s retention=%s",
		w.kind, w.size, w.advance, w.gap, w.grace, w.retention)
}

func (w Windows) validate(b *Builder, step string) {
	switch w.kind {
	case session:
		if w.gap <= 0 {
			b.fail(step, "session gap %s must be positive", w.gap)
		}
	default:
		if w.size <= 0 {
			b.fail(step, "%s window size %s must be positive", w.kind, w.size)
		}
	}
	if w.kind == hopping && (w.advance <= 0 || w.advance > w.size) {
		b.fail(step, "hopping window advance %s must be positive and at most the size %s", w.advance, w.size)
	}
	if !w.graceSet {
		b.fail(step, "%s window has no grace period; call Grace(d) (0 is allowed)", w.kind)
	} else if w.grace < 0 {
		b.fail(step, "grace period %s is negative", w.grace)
	}
	if w.retention < 0 {
		b.fail(step, "retention %s is negative", w.retention)
	}
}

// span is the length after a window's start at which it ends, for expiry.
func (w Windows) span() time.Duration {
	if w.kind == session {
		return w.gap
	}
	return w.size
}

// Windowed is a grouped stream with windows, ready to aggregate per key and window.
type Windowed[V any] struct {
	g *Grouped[V]
	w Windows
}

// WindowBy puts the records of g into windows w.
func WindowBy[V any](g *Grouped[V], w Windows) *Windowed[V] { return &Windowed[V]{g: g, w: w} }

// windowChange is one update of one window of a key.
type windowChange[A any] struct {
	start, end int64
	val        A
	deleted    bool
}

// WindowedTable is the result of a windowed aggregation: one value per key and window.
type WindowedTable[A any] struct {
	b  *Builder
	st *storeSpec
	w  Windows
	p  *port[windowChange[A]]
	// srcs are the topics of the grouped stream, for the co-partitioning checks of the steps
	// that [WindowedTable.ToStream] feeds.
	srcs []topicRef
}

// Serve makes t the view's queryable store. Values of tumbling, hopping and sliding windows are
// the accumulators as JSON; session values are {"end": <unix ms>, "value": <accumulator>}.
func (t *WindowedTable[A]) Serve() {
	t.b.serve(t.st.name, t.st)
	t.b.view.windows = &t.w
}

// WindowRecord is the JSON value [WindowedTable.To] writes for each window update.
type WindowRecord[A any] struct {
	Key   string    `json:"key"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	Value *A        `json:"value"` // nil when a merged session window was removed
}

// record is the [WindowRecord] of one window update of key.
func (c windowChange[A]) record(key string) WindowRecord[A] {
	rec := WindowRecord[A]{Key: key, Start: time.UnixMilli(c.start).UTC(), End: time.UnixMilli(c.end).UTC()}
	if !c.deleted {
		rec.Value = &c.val
	}
	return rec
}

// To sends each window update to topicName as a JSON [WindowRecord] keyed by the key.
func (t *WindowedTable[A]) To(topicName string) {
	b := t.b
	if topicName == "" {
		b.fail(t.st.name, "To needs a topic")
		return
	}
	b.view.outputs = append(b.view.outputs, topicName)
	b.describe("to-windows %s", topicName)
	t.p.to(func(tk *task, key string, c windowChange[A], ts int64) error {
		raw, err := json.Marshal(c.record(key))
		if err != nil {
			return fmt.Errorf("views: view %q: encode window record: %w", tk.env.view.name, err)
		}
		tk.produceKeyed(topicName, key, raw, ts)
		return nil
	})
}

// ToStream continues the view with the table's updates: one [WindowRecord] per window that a
// change made, keyed by the table's key. Tumbling and hopping windows fold a batch's updates
// of one window into one, at the newest event time the window took in the batch, as the
// store's changelog does: a consumer sees each window's values in order, not necessarily
// every one of them (as behind Kafka Streams' record cache). Nothing goes through Kafka: the
// stream stays in the table's task until a later step re-keys and groups it.
func (t *WindowedTable[A]) ToStream() *Stream[WindowRecord[A]] {
	t.b.describe("to-stream %s", t.st.name)
	out := &Stream[WindowRecord[A]]{b: t.b, sub: t.st.sub, p: &port[WindowRecord[A]]{}, srcs: t.srcs}
	t.p.to(func(tk *task, key string, c windowChange[A], ts int64) error {
		return out.p.emit(tk, key, c.record(key), ts)
	})
	return out
}

// CountWindows counts the records of each key and window.
func CountWindows[V any](w *Windowed[V], step string) *WindowedTable[int64] {
	return AggregateWindows(w, step, CountOf[V]())
}

// AggregateWindows folds the values of each key and window with agg, in a windowed store named
// step.
func AggregateWindows[V, A any](w *Windowed[V], step string, agg Aggregator[V, A]) *WindowedTable[A] {
	s := w.g.s
	b := s.b
	b.step("aggregate", step)
	w.w.validate(b, step)
	agg.validate(b, step, false, w.w.kind == session)
	b.describe("aggregate-windows %s %s agg=%s %s->%s", step, w.w, agg.Name, typeName[V](), typeName[A]())
	st := b.newStore(s.sub, step, true)
	st.span, st.grace, st.retention = w.w.span(), w.w.grace, w.w.retention
	out := &WindowedTable[A]{b: b, st: st, w: w.w, p: &port[windowChange[A]]{}, srcs: s.srcs}
	if agg.Init == nil || agg.Add == nil || (w.w.kind == session && agg.Merge == nil) {
		return out
	}
	op := &windowOp[V, A]{step: step, w: w.w, agg: agg, st: st, out: out.p}
	switch w.w.kind {
	case tumbling, hopping:
		s.p.to(op.fixed)
	case session:
		s.p.to(op.session)
	case sliding:
		op.raw = b.newStore(s.sub, step+"-raw", true)
		// The raw records are needed while a window covering them is open; the extra
		// millisecond is the end instant that sliding windows include.
		op.raw.span, op.raw.grace, op.raw.retention = w.w.size, w.w.grace, time.Millisecond
		s.p.to(op.sliding)
	}
	return out
}

// windowOp runs one windowed aggregation.
type windowOp[V, A any] struct {
	step string
	w    Windows
	agg  Aggregator[V, A]
	st   *storeSpec
	raw  *storeSpec // sliding windows: the raw records, as JSON lists per (key, time)
	out  *port[windowChange[A]]
}

// closed reports whether a window ending at end no longer takes records at watermark wm.
func (o *windowOp[V, A]) closed(end, wm int64) bool {
	return end+o.w.grace.Milliseconds() <= wm
}

// late sends the current record to the dead-letter topic for the windows it missed.
func (o *windowOp[V, A]) late(tk *task, ts, wm int64, missed []int64) {
	starts := make([]byte, 0, 16*len(missed))
	for i, s := range missed {
		if i > 0 {
			starts = append(starts, ',')
		}
		starts = strconv.AppendInt(starts, s, 10)
	}
	tk.deadLetter(o.step, "late",
		fmt.Sprintf("event time %d is beyond the grace period %s of %d window(s) at watermark %d", ts, o.w.grace, len(missed), wm),
		kgo.RecordHeader{Key: "tarn.watermark", Value: strconv.AppendInt(nil, wm, 10)},
		kgo.RecordHeader{Key: "tarn.windows", Value: starts})
}

// fixed aggregates into tumbling or hopping windows.
func (o *windowOp[V, A]) fixed(tk *task, key string, v V, ts int64) error {
	wm := tk.wm.current(tk.wallNow())
	size, adv := o.w.size.Milliseconds(), o.w.advance.Milliseconds()
	var missed []int64
	c := winCacheOf(tk, o.st, o.out, size)
	for start := floorDiv(ts, adv) * adv; start > ts-size; start -= adv {
		if o.closed(start+size, wm) {
			missed = append(missed, start)
			continue
		}
		e, err := c.load(key, start, o.agg.Init)
		if err != nil {
			return err
		}
		e.val = o.agg.Add(e.val, v)
		e.touch(ts)
	}
	if len(missed) > 0 {
		o.late(tk, ts, wm, missed)
	}
	return nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// sessionValue is how session windows are stored: the end is not implied by the start.
type sessionValue[A any] struct {
	End   int64 `json:"end"`
	Value A     `json:"value"`
}

// session merges the record into the sessions of its key within the gap.
func (o *windowOp[V, A]) session(tk *task, key string, v V, ts int64) error {
	wm := tk.wm.current(tk.wallNow())
	gap := o.w.gap.Milliseconds()
	ws := tk.win[o.st.index]
	k := []byte(key)
	start, end, acc := ts, ts, o.agg.Add(o.agg.Init(), v)
	var merged []windowChange[A]
	err := ws.Fetch(k, minTime, ts+gap, func(s int64, raw []byte) error {
		var sv sessionValue[A]
		if err := json.Unmarshal(raw, &sv); err != nil {
			return fmt.Errorf("views: view %q store %q: session of key %q: %w", tk.env.view.name, o.st.name, key, err)
		}
		if sv.End < ts-gap {
			return nil
		}
		merged = append(merged, windowChange[A]{start: s, end: sv.End, val: sv.Value})
		return nil
	})
	if err != nil {
		return err
	}
	for _, m := range merged {
		start, end, acc = min(start, m.start), max(end, m.end), o.agg.Merge(m.val, acc)
	}
	if o.closed(end+gap, wm) {
		o.late(tk, ts, wm, []int64{start})
		return nil
	}
	for _, m := range merged {
		if m.start == start {
			continue
		}
		if err := ws.Delete(k, m.start); err != nil {
			return err
		}
		m.deleted = true
		if err := o.out.emit(tk, key, m, ts); err != nil {
			return err
		}
	}
	raw, err := json.Marshal(sessionValue[A]{End: end, Value: acc})
	if err != nil {
		return fmt.Errorf("views: view %q store %q: encode: %w", tk.env.view.name, o.st.name, err)
	}
	if err := ws.Set(k, start, raw); err != nil {
		return err
	}
	return o.out.emit(tk, key, windowChange[A]{start: start, end: end, val: acc}, ts)
}

const minTime = -1 << 62

// sliding stores the raw record and refolds every open window that covers it: its own window
// [ts-size, ts] and the key's later windows ending within size after it.
func (o *windowOp[V, A]) sliding(tk *task, key string, v V, ts int64) error {
	wm := tk.wm.current(tk.wallNow())
	size := o.w.size.Milliseconds()
	k := []byte(key)
	if o.closed(ts+size+1, wm) {
		o.late(tk, ts, wm, []int64{ts - size})
		return nil
	}
	raws := tk.win[o.raw.index]
	var list []V
	if raw, ok, err := raws.Get(k, ts); err != nil {
		return err
	} else if ok {
		if err := json.Unmarshal(raw, &list); err != nil {
			return fmt.Errorf("views: view %q store %q: %w", tk.env.view.name, o.raw.name, err)
		}
	}
	raw, err := json.Marshal(append(list, v))
	if err != nil {
		return fmt.Errorf("views: view %q store %q: encode: %w", tk.env.view.name, o.raw.name, err)
	}
	if err := raws.Set(k, ts, raw); err != nil {
		return err
	}
	ends := []int64{ts}
	err = tk.win[o.st.index].Fetch(k, ts-size+1, ts, func(start int64, _ []byte) error {
		if e := start + size; e != ts {
			ends = append(ends, e)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var missed []int64
	for _, e := range ends {
		if o.closed(e+1, wm) {
			missed = append(missed, e-size)
			continue
		}
		if err := o.refold(tk, k, e, ts); err != nil {
			return err
		}
	}
	if len(missed) > 0 {
		o.late(tk, ts, wm, missed)
	}
	return nil
}

// refold recomputes the sliding window of key ending at end from the raw records.
func (o *windowOp[V, A]) refold(tk *task, k []byte, end, ts int64) error {
	size := o.w.size.Milliseconds()
	acc := o.agg.Init()
	err := tk.win[o.raw.index].Fetch(k, end-size, end, func(_ int64, raw []byte) error {
		var list []V
		if err := json.Unmarshal(raw, &list); err != nil {
			return fmt.Errorf("views: view %q store %q: %w", tk.env.view.name, o.raw.name, err)
		}
		for _, v := range list {
			acc = o.agg.Add(acc, v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	raw, err := json.Marshal(acc)
	if err != nil {
		return fmt.Errorf("views: view %q store %q: encode: %w", tk.env.view.name, o.st.name, err)
	}
	if err := tk.win[o.st.index].Set(k, end-size, raw); err != nil {
		return err
	}
	return o.out.emit(tk, string(k), windowChange[A]{start: end - size, end: end + 1, val: acc}, ts)
}

// winCache is the per-batch accumulator cache of tumbling and hopping windows.
type winCache[A any] struct {
	tk      *task
	st      *storeSpec
	out     *port[windowChange[A]]
	size    int64
	entries map[winKey]*cacheEntry[A]
	order   []winKey
}

type winKey struct {
	key   string
	start int64
}

func winCacheOf[A any](tk *task, st *storeSpec, out *port[windowChange[A]], size int64) *winCache[A] {
	return taskState(tk, st.name, func() *winCache[A] {
		c := &winCache[A]{tk: tk, st: st, out: out, size: size, entries: map[winKey]*cacheEntry[A]{}}
		tk.flushers = append(tk.flushers, c.flush)
		return c
	})
}

func (c *winCache[A]) load(key string, start int64, init func() A) (*cacheEntry[A], error) {
	wk := winKey{key, start}
	if e, ok := c.entries[wk]; ok {
		return e, nil
	}
	e := &cacheEntry[A]{val: init()}
	raw, ok, err := c.tk.win[c.st.index].Get([]byte(key), start)
	if err != nil {
		return nil, err
	}
	if ok {
		if err := json.Unmarshal(raw, &e.val); err != nil {
			return nil, fmt.Errorf("views: view %q store %q: window %d of key %q: %w", c.tk.env.view.name, c.st.name, start, key, err)
		}
		e.old, e.existed = e.val, true
	}
	c.entries[wk] = e
	c.order = append(c.order, wk)
	return e, nil
}

func (c *winCache[A]) flush() error {
	for _, wk := range c.order {
		e := c.entries[wk]
		raw, err := json.Marshal(e.val)
		if err != nil {
			return fmt.Errorf("views: view %q store %q: encode: %w", c.tk.env.view.name, c.st.name, err)
		}
		if err := c.tk.win[c.st.index].Set([]byte(wk.key), wk.start, raw); err != nil {
			return err
		}
		if err := c.out.emit(c.tk, wk.key, windowChange[A]{start: wk.start, end: wk.start + c.size, val: e.val}, e.ts); err != nil {
			return err
		}
	}
	clear(c.entries)
	c.order = c.order[:0]
	return nil
}
