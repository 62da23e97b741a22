package serve_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/serve"
)

// pebbleBackend is a serve.Backend on a real Pebble store: each view keeps its data and the
// offsets it has applied in one Pebble instance (written in one batch per change, as state/
// does), and a log of its changes in memory for Subscribe.
type pebbleBackend struct {
	db    *pebble.DB
	mu    sync.Mutex
	views map[string]*pebbleView
	ready error
}

func newPebbleBackend(tb testing.TB) *pebbleBackend {
	tb.Helper()
	b, err := openPebbleBackend(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := b.db.Close(); err != nil {
			tb.Error(err)
		}
	})
	return b
}

// openPebbleBackend opens a backend in dir; close its db when done.
func openPebbleBackend(dir string) (*pebbleBackend, error) {
	cache := pebble.NewCache(256 << 20)
	defer cache.Unref()
	db, err := pebble.Open(dir, &pebble.Options{Cache: cache, Logger: quietLogger{}})
	if err != nil {
		return nil, err
	}
	return &pebbleBackend{db: db, views: map[string]*pebbleView{}}, nil
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)         {}
func (quietLogger) Errorf(string, ...any)        {}
func (quietLogger) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

// addView defines a view of n partitions, all owned locally and running.
func (b *pebbleBackend) addView(name string, n int32, windowed bool) *pebbleView {
	v := &pebbleView{b: b, name: name, parts: n, windowed: windowed, version: 1,
		owners: make([]serve.Owner, n), history: map[int32][]serve.Change{}, subs: map[int]*subscriber{},
		changed: make(chan struct{})}
	v.pos.Store(&serve.Position{Offsets: map[int32]int64{}})
	for p := range v.owners {
		v.owners[p] = serve.Owner{Local: true}
	}
	b.mu.Lock()
	b.views[name] = v
	b.mu.Unlock()
	return v
}

func (b *pebbleBackend) Views() []serve.ViewInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []serve.ViewInfo
	for _, name := range slices.Sorted(maps.Keys(b.views)) {
		out = append(out, b.views[name].Info())
	}
	return out
}

func (b *pebbleBackend) View(name string) (serve.View, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.views[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", serve.ErrUnknownView, name)
	}
	return v, nil
}

func (b *pebbleBackend) Ready() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ready
}

// pebbleView is one view of a pebbleBackend.
type pebbleView struct {
	b        *pebbleBackend
	name     string
	parts    int32
	windowed bool

	// mu orders applies against reads: an apply writes Pebble, hands the change to the
	// subscribers and then moves pos, all under mu, so a read under mu.RLock sees data and
	// position that agree.
	mu      sync.RWMutex
	version int
	owners  []serve.Owner
	history map[int32][]serve.Change // per partition; the change at offset o is history[p][o-trimmed[p]]
	trimmed map[int32]int64
	subs    map[int]*subscriber
	nextSub int
	changed chan struct{}                  // closed and replaced when pos moves
	pos     atomic.Pointer[serve.Position] // immutable once stored

	// gets counts Get calls; a Get waits for gate while it is set (singleflight tests).
	gets atomic.Int64
	gate atomic.Pointer[chan struct{}]
	// waiting counts WaitFor calls under way.
	waiting atomic.Int64
}

func (v *pebbleView) waiters() int64 { return v.waiting.Load() }

type subscriber struct {
	req serve.SubscribeRequest
	fn  func(serve.Change) bool
}

func (v *pebbleView) dataKey(key []byte) []byte {
	return append([]byte(v.name+"\x00d"), key...)
}

func (v *pebbleView) windowPrefix(key []byte) []byte {
	b := []byte(v.name + "\x00w")
	b = binary.AppendUvarint(b, uint64(len(key)))
	return append(b, key...)
}

func (v *pebbleView) offsetKey(p int32) []byte {
	return binary.BigEndian.AppendUint32([]byte(v.name+"\x00o"), uint32(p))
}

// setOwner changes who owns partition p.
func (v *pebbleView) setOwner(p int32, o serve.Owner) {
	v.mu.Lock()
	v.owners[p] = o
	v.mu.Unlock()
}

// apply writes one change (value nil deletes) at the partition's next offset and returns it.
func (v *pebbleView) apply(tb testing.TB, key []byte, value any) serve.Change {
	tb.Helper()
	c, err := v.applyJSON(key, mustJSON(tb, value), 0)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func mustJSON(tb testing.TB, value any) json.RawMessage {
	if value == nil {
		return nil
	}
	b, err := json.Marshal(value)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func (v *pebbleView) applyJSON(key []byte, value json.RawMessage, lsn serve.LSN) (serve.Change, error) {
	p := partition.For(key, v.parts)
	v.mu.Lock()
	defer v.mu.Unlock()
	pos := *v.pos.Load()
	c := serve.Change{Partition: p, Offset: pos.Offsets[p], Key: bytes.Clone(key), Value: value, LSN: lsn}
	batch := v.b.db.NewBatch()
	defer batch.Close()
	var err error
	if value == nil {
		err = batch.Delete(v.dataKey(key), nil)
	} else {
		err = batch.Set(v.dataKey(key), value, nil)
	}
	if err == nil {
		err = batch.Set(v.offsetKey(p), binary.BigEndian.AppendUint64(nil, uint64(c.Offset+1)), nil)
	}
	if err == nil {
		err = batch.Commit(pebble.NoSync)
	}
	if err != nil {
		return serve.Change{}, err
	}
	v.publishLocked(c)
	return c, nil
}

// load writes many keys fast (no history, no subscribers): for benchmarks.
func (v *pebbleView) load(tb testing.TB, n int, key func(int) []byte, value func(int) []byte) {
	tb.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	pos := *v.pos.Load()
	next := maps.Clone(pos.Offsets)
	batch := v.b.db.NewBatch()
	for i := range n {
		k := key(i)
		p := partition.For(k, v.parts)
		next[p]++
		if err := batch.Set(v.dataKey(k), value(i), nil); err != nil {
			tb.Fatal(err)
		}
		if batch.Count() >= 1000 || i == n-1 {
			for p, off := range next {
				_ = batch.Set(v.offsetKey(p), binary.BigEndian.AppendUint64(nil, uint64(off)), nil)
			}
			if err := batch.Commit(pebble.NoSync); err != nil {
				tb.Fatal(err)
			}
			batch.Close()
			batch = v.b.db.NewBatch()
		}
	}
	batch.Close()
	for p, off := range next {
		v.history[p] = nil
		v.trimmed = mapSet(v.trimmed, p, off)
	}
	v.pos.Store(&serve.Position{Offsets: next, LSN: pos.LSN})
}

func mapSet(m map[int32]int64, k int32, val int64) map[int32]int64 {
	if m == nil {
		m = map[int32]int64{}
	}
	m[k] = val
	return m
}

// publishLocked hands c to the subscribers, records it and only then moves the position,
// as serve.View.Subscribe requires.
func (v *pebbleView) publishLocked(c serve.Change) {
	for id, s := range v.subs {
		if !s.wants(c) {
			continue
		}
		if !s.fn(c) {
			delete(v.subs, id)
		}
	}
	v.history[c.Partition] = append(v.history[c.Partition], c)
	pos := *v.pos.Load()
	next := serve.Position{Offsets: maps.Clone(pos.Offsets), LSN: max(pos.LSN, c.LSN)}
	next.Offsets[c.Partition] = c.Offset + 1
	v.pos.Store(&next)
	close(v.changed)
	v.changed = make(chan struct{})
}

func (s *subscriber) wants(c serve.Change) bool {
	return slices.Contains(s.req.Partitions, c.Partition) && (!s.req.HasKey || bytes.Equal(s.req.Key, c.Key))
}

// trim forgets the history of partition p below offset off, as a retention limit would.
func (v *pebbleView) trim(p int32, off int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	drop := off - v.trimmed[p]
	v.history[p] = v.history[p][drop:]
	v.trimmed = mapSet(v.trimmed, p, off)
}

func (v *pebbleView) Info() serve.ViewInfo {
	v.mu.RLock()
	defer v.mu.RUnlock()
	info := serve.ViewInfo{Name: v.name, Version: v.version, State: serve.StateRunning, Windowed: v.windowed,
		Partitions: v.parts, Owned: []int32{}, Position: v.localPositionLocked()}
	for p, o := range v.owners {
		if o.Local {
			info.Owned = append(info.Owned, int32(p))
			if o.Restoring {
				info.State = serve.StateRestoring
			}
		}
	}
	if v.version > 1 && info.State == serve.StateRunning {
		info.State = serve.StateRebuilding
	}
	return info
}

func (v *pebbleView) Partition(key []byte) int32 { return partition.For(key, v.parts) }

func (v *pebbleView) Owner(p int32) serve.Owner {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.owners[p]
}

// localPositionLocked is the position restricted to the locally owned partitions.
func (v *pebbleView) localPositionLocked() serve.Position {
	pos := *v.pos.Load()
	out := serve.Position{Offsets: map[int32]int64{}, LSN: pos.LSN}
	for p, o := range v.owners {
		if o.Local {
			out.Offsets[int32(p)] = pos.Offsets[int32(p)]
		}
	}
	return out
}

func (v *pebbleView) Position() serve.Position {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.localPositionLocked()
}

func (v *pebbleView) WaitFor(ctx context.Context, target serve.Position) error {
	v.waiting.Add(1)
	defer v.waiting.Add(-1)
	for {
		v.mu.RLock()
		local := serve.Position{LSN: target.LSN, Offsets: map[int32]int64{}}
		for p, off := range target.Offsets {
			if p >= 0 && p < v.parts && v.owners[p].Local {
				local.Offsets[p] = off
			}
		}
		reached := v.localPositionLocked().Reached(local)
		changed := v.changed
		v.mu.RUnlock()
		if reached {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Inputs makes the fake an InputWaiter: each view reads one topic, "<view>-events", whose
// record at offset o on partition p is the view's change at offset o on p.
func (v *pebbleView) Inputs() []string { return []string{v.name + "-events"} }

func (v *pebbleView) WaitInputs(ctx context.Context, next serve.InputOffsets) error {
	return v.WaitFor(ctx, serve.Position{Offsets: next[v.name+"-events"]})
}

// checkLocked reports why partition p cannot be read.
func (v *pebbleView) checkLocked(p int32, restoringOK bool) error {
	o := v.owners[p]
	switch {
	case !o.Local:
		return &serve.NotOwnerError{Partition: p, Addr: o.Addr}
	case o.Restoring && !restoringOK:
		return serve.ErrRestoring
	}
	return nil
}

func (v *pebbleView) Get(_ context.Context, key []byte) (serve.Read, error) {
	v.gets.Add(1)
	if gate := v.gate.Load(); gate != nil {
		<-*gate
	}
	p := partition.For(key, v.parts)
	v.mu.RLock()
	defer v.mu.RUnlock()
	if err := v.checkLocked(p, false); err != nil {
		return serve.Read{}, err
	}
	rd := serve.Read{Position: v.localPositionLocked()}
	val, closer, err := v.b.db.Get(v.dataKey(key))
	if err == pebble.ErrNotFound {
		return rd, nil
	}
	if err != nil {
		return serve.Read{}, err
	}
	rd.Found, rd.Value = true, bytes.Clone(val)
	return rd, closer.Close()
}

func (v *pebbleView) Scan(_ context.Context, req serve.ScanRequest) (serve.ScanResult, error) {
	v.mu.RLock()
	if req.Version != 0 && req.Version != v.version {
		v.mu.RUnlock()
		return serve.ScanResult{}, fmt.Errorf("%w: %d", serve.ErrNoVersion, req.Version)
	}
	for _, p := range req.Partitions {
		if err := v.checkLocked(p, false); err != nil {
			v.mu.RUnlock()
			return serve.ScanResult{}, err
		}
	}
	snap := v.b.db.NewSnapshot()
	res := serve.ScanResult{Position: v.localPositionLocked().Only(req.Partitions), Version: v.version}
	v.mu.RUnlock()
	defer snap.Close()
	opts := &pebble.IterOptions{LowerBound: v.dataKey(req.Start), UpperBound: v.dataKey(req.End)}
	if req.End == nil {
		opts.UpperBound = []byte(v.name + "\x00e")
	}
	it, err := snap.NewIter(opts)
	if err != nil {
		return serve.ScanResult{}, err
	}
	defer it.Close()
	prefix := len(v.dataKey(nil))
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()[prefix:]
		if !slices.Contains(req.Partitions, partition.For(k, v.parts)) {
			continue
		}
		if len(res.Entries) == req.Limit {
			res.More = true
			break
		}
		res.Entries = append(res.Entries, serve.Entry{Key: bytes.Clone(k), Value: bytes.Clone(it.Value())})
	}
	return res, it.Error()
}

// putWindow writes the window [start, end) of key.
func (v *pebbleView) putWindow(tb testing.TB, key []byte, start, end time.Time, value any) {
	tb.Helper()
	k := binary.BigEndian.AppendUint64(v.windowPrefix(key), uint64(start.UnixMilli()))
	val := binary.BigEndian.AppendUint64(nil, uint64(end.UnixMilli()))
	if err := v.b.db.Set(k, append(val, mustJSON(tb, value)...), pebble.NoSync); err != nil {
		tb.Fatal(err)
	}
}

func (v *pebbleView) Windows(_ context.Context, key []byte, from, to time.Time) ([]serve.Window, serve.Position, error) {
	if !v.windowed {
		return nil, serve.Position{}, serve.ErrNotWindowed
	}
	p := partition.For(key, v.parts)
	v.mu.RLock()
	if err := v.checkLocked(p, false); err != nil {
		v.mu.RUnlock()
		return nil, serve.Position{}, err
	}
	snap := v.b.db.NewSnapshot()
	pos := v.localPositionLocked()
	v.mu.RUnlock()
	defer snap.Close()
	prefix := v.windowPrefix(key)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: append(bytes.Clone(prefix), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)})
	if err != nil {
		return nil, serve.Position{}, err
	}
	defer it.Close()
	var out []serve.Window
	for valid := it.First(); valid; valid = it.Next() {
		start := time.UnixMilli(int64(binary.BigEndian.Uint64(it.Key()[len(prefix):]))).UTC()
		val := it.Value()
		end := time.UnixMilli(int64(binary.BigEndian.Uint64(val))).UTC()
		if end.After(from) && start.Before(to) {
			out = append(out, serve.Window{Start: start, End: end, Value: bytes.Clone(val[8:])})
		}
	}
	return out, pos, it.Error()
}

func (v *pebbleView) Subscribe(req serve.SubscribeRequest, fn func(serve.Change) bool) (serve.Position, func(), error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	pos := *v.pos.Load()
	start := serve.Position{Offsets: map[int32]int64{}, LSN: pos.LSN}
	for _, p := range req.Partitions {
		if err := v.checkLocked(p, true); err != nil {
			return serve.Position{}, nil, err
		}
		from, ok := req.After.Offsets[p]
		if ok {
			// The LSN vouches for the current offsets only: a stream resuming from older
			// ones has not yet been handed everything up to it (as the real adapter says).
			start.LSN = 0
		}
		if !ok || from > pos.Offsets[p] {
			from = pos.Offsets[p]
		}
		if from < v.trimmed[p] {
			return serve.Position{}, nil, fmt.Errorf("%w: partition %d keeps offsets from %d", serve.ErrTooOld, p, v.trimmed[p])
		}
		start.Offsets[p] = from
	}
	s := &subscriber{req: req, fn: fn}
	for _, p := range req.Partitions {
		for _, c := range v.history[p][start.Offsets[p]-v.trimmed[p]:] {
			if s.wants(c) && !fn(c) {
				return start, func() {}, nil
			}
		}
	}
	id := v.nextSub
	v.nextSub++
	v.subs[id] = s
	return start, func() {
		v.mu.Lock()
		delete(v.subs, id)
		v.mu.Unlock()
	}, nil
}

// subscribers counts the live subscriptions.
func (v *pebbleView) subscribers() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.subs)
}

// rebuildable is a pebbleView that can be rebuilt: it starts version+1.
type rebuildable struct{ *pebbleView }

func (r rebuildable) Rebuild(context.Context) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.version++
	return r.version, nil
}

// stop ends every live subscription with serve.ErrStopping, as an instance that stops does.
func (v *pebbleView) stop() {
	v.mu.Lock()
	subs := v.subs
	v.subs = map[int]*subscriber{}
	v.mu.Unlock()
	for _, s := range subs {
		if s.req.Ended != nil {
			s.req.Ended(serve.ErrStopping)
		}
	}
}
