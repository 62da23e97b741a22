package enrich

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"

	json "github.com/goccy/go-json"

	"github.com/tarnhq/tarn/views"
	"github.com/twmb/franz-go/pkg/kgo"
)

// WindowJoin is a windowed stream–stream join (see [JoinWindows]).
type WindowJoin[L, R, W any] struct {
	// Left and Right are the inputs, keyed by the join key: topics (views.FromTopic, which
	// must be co-partitioned) or streams of the view (views.FromStream, repartitioned by
	// their keys). Required.
	Left  views.Feed[L]
	Right views.Feed[R]
	// A left record at time t matches the right records of its key with time in
	// [t-Before, t+After]. For impressions (left) and the clicks that follow them within ten
	// minutes (right): Before 0, After 10 minutes. At least one must be positive.
	Before, After time.Duration
	// Grace is how long after a record's window has passed (by the join's stream time) a
	// record of it is still accepted; later ones go to the dead-letter topic ("late").
	Grace time.Duration
	// Mode: Inner emits matches; Left also emits each left record that matched nothing once
	// its window closed; Outer does so for right records too.
	Mode Mode
	// Join makes the output of a match, or of an unmatched record (the other side nil).
	// Required.
	Join func(key string, l *L, r *R) W
}

// JoinWindows joins two streams keyed alike in event time. Both sides are buffered in
// windowed stores backed by changelogs (step + "-left", step + "-right"), so a restarted
// instance continues with every record still in a window; unmatched records of outer sides
// are tracked in a store (step + "-open") and emitted once their window closed.
//
// Time: the join's stream time is the largest record time its task has seen on either input
// (as in Kafka Streams), persisted with the stores. A left record at t is late once stream
// time passed t + After + Grace, a right record at t once it passed t + Before + Grace: it is
// then sent to the dead-letter topic and counted. Records inside grace join every buffered
// record of the other side in their window, whatever their arrival order, so the matches do
// not depend on how the inputs interleave as long as no record is late. A record's window
// closes once stream time passed t + Before + After + Grace: no record that is not late can
// match it any more, so an unmatched record of an outer side is emitted with a nil partner
// then (at the end of the batch that closed it), never before. Give a grace that covers the
// skew between the two inputs: a lagging input's records are late once the other input has
// moved past their window plus grace.
//
// A match is emitted with the later of the two times, an unmatched record with its own.
func JoinWindows[L, R, W any](b *views.Builder, step string, j WindowJoin[L, R, W]) *views.Stream[W] {
	if j.Join == nil {
		b.Fail(step, fmt.Errorf("%w: Join function is nil", ErrJoin))
	}
	if j.Before < 0 || j.After < 0 || j.Grace < 0 || j.Before+j.After <= 0 {
		b.Fail(step, fmt.Errorf("%w: Before %s and After %s must not be negative and not both zero, Grace %s not negative",
			ErrJoin, j.Before, j.After, j.Grace))
	}
	if j.Mode < Inner || j.Mode > Outer {
		b.Fail(step, fmt.Errorf("%w: unknown mode %s", ErrJoin, j.Mode))
	}
	b.Describe("join-windows %s mode=%s before=%s after=%s grace=%s", step, j.Mode, j.Before, j.After, j.Grace)
	both := views.Merge(b, step+"-in", j.Left, j.Right)
	// A buffered record is needed until stream time passes its time + Before + After + Grace;
	// the store's own clock never runs ahead of stream time, so it keeps it at least as long.
	span := j.Before + j.After + time.Millisecond
	op := &windowJoin[L, R, W]{j: j, step: step, buffer: step + "-buffer", open: step + "-open"}
	return views.Process(both, step, views.Processor[views.Either[L, R], W]{
		Stores: []views.StoreDecl{views.WindowStore(op.buffer, span, j.Grace), views.KVStore(op.open)},
		Record: op.record,
		Flush:  op.flush,
	})
}

type windowJoin[L, R, W any] struct {
	j            WindowJoin[L, R, W]
	step         string
	buffer, open string
}

// buffered is one record in the buffer. Matched is kept only for sides whose unmatched
// records are emitted.
type buffered[T any] struct {
	V       T    `json:"v"`
	Matched bool `json:"m,omitempty"`
}

// slot holds the records of both sides of one key at one time: one windowed-store entry, so
// that the fetch of a record's match range also returns the slot the record goes into.
type slot[L, R any] struct {
	L []buffered[L] `json:"l,omitempty"`
	R []buffered[R] `json:"r,omitempty"`
}

// Keys of the open store: the stream time, and one entry per unmatched record of an outer
// side, ordered by the time its window closes.
var (
	streamTimeKey = []byte("t")
	openPrefix    = byte('o')
)

const (
	sideLeft  = byte('l')
	sideRight = byte('r')
)

func (o *windowJoin[L, R, W]) record(pc *views.ProcessContext[W], key string, e views.Either[L, R], ts time.Time) error {
	st, err := o.streamTime(pc)
	if err != nil {
		return err
	}
	t := ts.UnixMilli()
	// A left record at t matches right records in [t-Before, t+After], a right one left
	// records in [t-After, t+Before]; it is late once its reach ahead plus grace has passed.
	lo, hi := o.j.Before, o.j.After
	if e.IsRight {
		lo, hi = o.j.After, o.j.Before
	}
	if reach := t + (hi + o.j.Grace).Milliseconds(); reach < st {
		pc.DeadLetter("late", fmt.Sprintf("event time %d is beyond the grace period %s of its join window at stream time %d",
			t, o.j.Grace, st), kgo.RecordHeader{Key: "tarn.streamtime", Value: strconv.AppendInt(nil, st, 10)})
		return nil
	}
	if t > st {
		if err := o.setStreamTime(pc, t); err != nil {
			return err
		}
	}
	k, buf := []byte(key), pc.Window(o.buffer)
	var own slot[L, R]
	matched := false
	err = buf.Fetch(k, t-lo.Milliseconds(), t+hi.Milliseconds(), func(start int64, raw []byte) error {
		var sl slot[L, R]
		if err := json.Unmarshal(raw, &sl); err != nil {
			return fmt.Errorf("enrich: view %q: buffered records of key %q at %d: %w", pc.View(), key, start, err)
		}
		var m, changed bool
		var err error
		if e.IsRight {
			m, changed, err = matchAll(pc, o.opens(), key, t, start, sideLeft, &e.Right, sl.L, func(r *R, l *L) W { return o.j.Join(key, l, r) })
		} else {
			m, changed, err = matchAll(pc, o.opens(), key, t, start, sideRight, &e.Left, sl.R, func(l *L, r *R) W { return o.j.Join(key, l, r) })
		}
		matched = matched || m
		switch {
		case err != nil:
			return err
		case start == t:
			own = sl // written below with the new record
		case changed:
			return setSlot(buf, k, start, sl)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if e.IsRight {
		track := o.j.Mode == Outer
		own.R = append(own.R, buffered[R]{V: e.Right, Matched: matched || !track})
		err = o.openIfUnmatched(pc, track && !matched, sideRight, t, len(own.R)-1, key, e.Right)
	} else {
		track := o.j.Mode != Inner
		own.L = append(own.L, buffered[L]{V: e.Left, Matched: matched || !track})
		err = o.openIfUnmatched(pc, track && !matched, sideLeft, t, len(own.L)-1, key, e.Left)
	}
	if err != nil {
		return err
	}
	return setSlot(buf, k, t, own)
}

// matchAll joins v (of the side opposite to side) with the buffered records of side in a
// slot at start, marking them matched; a record that was open is closed.
func matchAll[W, A, B any](pc *views.ProcessContext[W], o opens, key string, t, start int64,
	side byte, v *A, list []buffered[B], join func(*A, *B) W) (matched, changed bool, err error) {
	for i := range list {
		if err := pc.Emit(key, join(v, &list[i].V), time.UnixMilli(max(t, start))); err != nil {
			return true, changed, err
		}
		if !list[i].Matched {
			list[i].Matched, changed = true, true
			if err := pc.KV(o.store).Delete(openKey(o.closeOf(start), side, start, i, key)); err != nil {
				return true, changed, err
			}
		}
	}
	return len(list) > 0, changed, nil
}

// openIfUnmatched opens an entry holding v, which waits for its window to close.
func (o *windowJoin[L, R, W]) openIfUnmatched(pc *views.ProcessContext[W], open bool, side byte, t int64, i int, key string, v any) error {
	if !open {
		return nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("enrich: encode open record: %w", err)
	}
	return pc.KV(o.open).Set(openKey(o.opens().closeOf(t), side, t, i, key), raw)
}

// opens names the open store and when windows close.
type opens struct {
	store      string
	closeAfter int64 // ms: Before + After + Grace
}

// closeOf is when the window of a record at t closes: no record that is not late can match
// it once stream time passed it.
func (o opens) closeOf(t int64) int64 { return t + o.closeAfter }

func (o *windowJoin[L, R, W]) opens() opens {
	return opens{store: o.open, closeAfter: (o.j.Before + o.j.After + o.j.Grace).Milliseconds()}
}

func setSlot[L, R any](w views.WindowKV, k []byte, t int64, sl slot[L, R]) error {
	raw, err := json.Marshal(sl)
	if err != nil {
		return fmt.Errorf("enrich: encode buffered records: %w", err)
	}
	return w.Set(k, t, raw)
}

// batchTime is the stream time as the current batch of a task knows it.
type batchTime struct {
	t     int64
	known bool
}

func (o *windowJoin[L, R, W]) streamTime(pc *views.ProcessContext[W]) (int64, error) {
	bt := views.BatchLocal(pc, o.step+"-time", func() *batchTime { return &batchTime{} })
	if bt.known {
		return bt.t, nil
	}
	raw, ok, err := pc.KV(o.open).Get(streamTimeKey)
	if err != nil {
		return minTime, err
	}
	bt.t, bt.known = minTime, true
	if ok {
		if len(raw) != 8 {
			return minTime, fmt.Errorf("enrich: view %q step %q: stream time has %d bytes, want 8", pc.View(), o.step, len(raw))
		}
		bt.t = int64(binary.BigEndian.Uint64(raw))
	}
	return bt.t, nil
}

func (o *windowJoin[L, R, W]) setStreamTime(pc *views.ProcessContext[W], t int64) error {
	views.BatchLocal(pc, o.step+"-time", func() *batchTime { return &batchTime{} }).t = t
	return pc.KV(o.open).Set(streamTimeKey, binary.BigEndian.AppendUint64(nil, uint64(t)))
}

const minTime = -1 << 62

// openKey orders open entries by close time: 'o' | close | side | time | index | key, with
// the times as sign-flipped big-endian so that byte order is time order.
func openKey(closeAt int64, side byte, t int64, i int, key string) []byte {
	b := make([]byte, 0, 1+8+1+8+4+len(key))
	b = append(b, openPrefix)
	b = binary.BigEndian.AppendUint64(b, uint64(closeAt)^1<<63)
	b = append(b, side)
	b = binary.BigEndian.AppendUint64(b, uint64(t)^1<<63)
	b = binary.BigEndian.AppendUint32(b, uint32(i))
	return append(b, key...)
}

// openEntry is a decoded open key with the record it holds.
type openEntry struct {
	raw   []byte // the key, to delete it
	side  byte
	t     int64
	key   string
	value []byte
}

func parseOpenKey(k, v []byte) (openEntry, error) {
	if len(k) < 22 || k[0] != openPrefix {
		return openEntry{}, fmt.Errorf("enrich: malformed open-record key %x", k)
	}
	return openEntry{raw: append([]byte(nil), k...), side: k[9], t: int64(binary.BigEndian.Uint64(k[10:18]) ^ 1<<63),
		key: string(k[22:]), value: append([]byte(nil), v...)}, nil
}

// flush emits the unmatched records of outer sides whose windows closed, in close order.
func (o *windowJoin[L, R, W]) flush(pc *views.ProcessContext[W]) error {
	if o.j.Mode == Inner {
		return nil
	}
	st, err := o.streamTime(pc)
	if err != nil || st == minTime {
		return err
	}
	kv := pc.KV(o.open)
	// Entries with close < st: the upper bound is the first key with close = st.
	upper := binary.BigEndian.AppendUint64([]byte{openPrefix}, uint64(st)^1<<63)
	var closed []openEntry
	err = kv.Range([]byte{openPrefix}, upper, func(k, v []byte) error {
		e, err := parseOpenKey(k, v)
		closed = append(closed, e)
		return err
	})
	if err != nil {
		return err
	}
	for _, e := range closed {
		if err := o.emitUnmatched(pc, e); err != nil {
			return err
		}
		if err := kv.Delete(e.raw); err != nil {
			return err
		}
	}
	return nil
}

func (o *windowJoin[L, R, W]) emitUnmatched(pc *views.ProcessContext[W], e openEntry) error {
	at := time.UnixMilli(e.t)
	bad := func(err error) error {
		return fmt.Errorf("enrich: view %q step %q: open record of key %q at %d: %w", pc.View(), o.step, e.key, e.t, err)
	}
	if e.side == sideLeft {
		var v L
		if err := json.Unmarshal(e.value, &v); err != nil {
			return bad(err)
		}
		return pc.Emit(e.key, o.j.Join(e.key, &v, nil), at)
	}
	var v R
	if err := json.Unmarshal(e.value, &v); err != nil {
		return bad(err)
	}
	return pc.Emit(e.key, o.j.Join(e.key, nil, &v), at)
}
