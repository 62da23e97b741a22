package views

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/state"
)

// Position is, per partition of a view, the changelog offset of its served store that the
// local copy has applied; responses carry it so clients can wait for their own writes.
type Position map[int32]int64

// Info describes one view as this instance runs it.
type Info struct {
	Name        Name
	Version     int
	Fingerprint string
	Windowed    bool
	Queryable   bool
	// Running is false before the view joined its group and while it rejoins.
	Running bool
	// Partitions is the partition count of the served store.
	Partitions int32
	// Owned are the served partitions this instance holds; Restoring those still restoring.
	Owned, Restoring []int32
	// Positions are the applied offsets of the owned partitions.
	Positions Position
	// Lag is, per input "topic/partition" this instance runs, the records between the
	// offset after its last applied (queryable) batch and the partition's end, measured
	// every second.
	Lag map[string]int64
	// Frozen is true while the serving version answers queries from its stores without
	// processing input: this binary's definition changed and is being rebuilt as a new
	// version, and the old definition's code is not in it.
	Frozen bool
	// Rebuild describes the version being rebuilt, or the last rebuild that failed or was
	// rolled back (with why); nil when there is none.
	Rebuild *RebuildInfo
	// Shadow is the comparison made before the serving version took over; nil for a first
	// version.
	Shadow *ShadowReport
	// Problem says why this instance runs no version of the view (an outdated definition).
	Problem string
	// Failing says why the serving version is not processing while it retries (Kafka
	// unreachable, a failed transaction), since FailingSince; "" when it processes.
	Failing      string
	FailingSince time.Time
}

// Views describes every view of the runtime, in configuration order.
func (r *Runtime) Views() []Info {
	out := make([]Info, 0, len(r.order))
	for _, vr := range r.order {
		out = append(out, vr.info())
	}
	return out
}

// Info describes one view, as Views does, without describing the others.
func (r *Runtime) Info(view Name) (Info, error) {
	for _, vr := range r.order {
		if vr.v.name == view {
			return vr.info(), nil
		}
	}
	return Info{}, fmt.Errorf("%w: %q", ErrUnknownView, view)
}

func (e *engine) info() Info {
	in := Info{Name: e.v.name, Version: e.v.version, Fingerprint: e.v.finger, Windowed: e.v.Windowed(),
		Queryable: e.v.Queryable(), Running: e.running.Load() && e.joined.Load(), Positions: e.positions(), Lag: map[string]int64{}}
	if e.v.served != nil && e.setUp.Load() {
		in.Partitions = e.subParts[e.v.served.sub.id]
	}
	if f := e.failed.Load(); f != nil {
		in.Failing, in.FailingSince = f.reason, f.since
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for id := range e.mu.tasks {
		if e.v.served != nil && id.sub == e.v.served.sub.id {
			in.Owned = append(in.Owned, id.part)
		}
	}
	for id := range e.mu.restoring {
		if e.v.served != nil && id.sub == e.v.served.sub.id {
			in.Restoring = append(in.Restoring, id.part)
		}
	}
	for k, v := range e.mu.lag {
		in.Lag[k] = v
	}
	slices.Sort(in.Owned)
	slices.Sort(in.Restoring)
	return in
}

// positions reads the applied offsets of the owned served partitions.
func (e *engine) positions() Position {
	pos := Position{}
	for _, t := range e.servedTasks() {
		if off, ok, err := t.served.Offset(e.rt.cfg.State); err == nil && ok {
			pos[t.partition] = off
		}
	}
	return pos
}

func (e *engine) servedTasks() []*runTask {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ts []*runTask
	for _, t := range e.mu.tasks {
		if t.served != nil {
			ts = append(ts, t)
		}
	}
	return ts
}

// PartitionOf returns the partition of view that holds key.
func (r *Runtime) PartitionOf(view Name, key string) (int32, error) {
	e, err := r.queryable(view)
	if err != nil {
		return 0, err
	}
	n := e.subParts[e.v.served.sub.id]
	return partition.For([]byte(key), n), nil
}

func (r *Runtime) queryable(view Name) (*engine, error) { return r.queryableAt(view, 0) }

// queryableAt returns the engine of a version of view (0: the serving one) if it can answer.
func (r *Runtime) queryableAt(view Name, version int) (*engine, error) {
	e, err := r.engineAt(view, version)
	if err != nil {
		return nil, err
	}
	if e.v.served == nil {
		return nil, fmt.Errorf("%w: view %q has no queryable store (only output topics)", ErrNotServed, view)
	}
	if !e.setUp.Load() {
		return nil, fmt.Errorf("%w: view %q version %d has not started", ErrRestoring, view, e.v.version)
	}
	return e, nil
}

// owned returns the served task of partition p, or why it cannot answer.
func (e *engine) owned(ctx context.Context, p int32) (*runTask, error) {
	id := taskID{e.v.served.sub.id, p}
	e.mu.Lock()
	t, restoring := e.mu.tasks[id], e.mu.restoring[id]
	e.mu.Unlock()
	switch {
	case restoring:
		return nil, fmt.Errorf("%w: view %q partition %d", ErrRestoring, e.v.name, p)
	case t == nil:
		addr, _ := e.owner(ctx, p)
		return nil, &NotOwnerError{View: e.v.name, Partition: p, Addr: addr}
	}
	return t, nil
}

// Get returns the JSON value of key in a key-value view, and the position of its partition.
// It fails with [*NotOwnerError] when another instance owns the partition, [ErrRestoring]
// while it restores and [ErrNotFound] for an absent key.
func (r *Runtime) Get(ctx context.Context, view Name, key string) ([]byte, Position, error) {
	e, err := r.queryable(view)
	if err != nil {
		return nil, nil, err
	}
	return e.get(ctx, key)
}

func (e *engine) get(ctx context.Context, key string) ([]byte, Position, error) {
	view := e.v.name
	kv, ok := e.v.servedKV()
	if !ok {
		return nil, nil, fmt.Errorf("%w: view %q is windowed; use Windows", ErrNotServed, view)
	}
	p := partition.For([]byte(key), e.subParts[kv.sub.id])
	t, err := e.owned(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	snap := e.rt.cfg.State.NewSnapshot()
	defer snap.Close()
	store := t.served.(*state.KV)
	pos := Position{}
	if off, ok, err := store.Offset(snap); err != nil {
		return nil, nil, err
	} else if ok {
		pos[p] = off
	}
	v, ok, err := store.Get(snap, []byte(key))
	switch {
	case err != nil:
		return nil, nil, err
	case !ok:
		return nil, pos, fmt.Errorf("%w: view %q key %q", ErrNotFound, view, key)
	}
	return v, pos, nil
}

func (v *View) servedKV() (*storeSpec, bool) { return v.served, v.served != nil && !v.served.windowed }

// Entry is one key and JSON value of a view.
type Entry struct {
	Key   string
	Value []byte
}

// ScanRange selects the entries a scan reads.
type ScanRange struct {
	// Partitions are the partitions to read; nil reads every partition this instance owns.
	Partitions []int32
	// Start and End bound the keys to [Start, End); End "" means no upper bound. A non-empty
	// Prefix keeps only keys that start with it.
	Prefix, Start, End string
	// Limit caps the entries returned; 0 means no cap.
	Limit int
}

// Scan returns the entries of rng in a key-value view, merged in key order over the
// partitions of rng this instance owns, all read from one Pebble snapshot. The position covers
// the partitions read. Partitions owned elsewhere are not included: a caller fans out to the
// owners ([Runtime.Owners]).
func (r *Runtime) Scan(view Name, rng ScanRange) ([]Entry, Position, error) {
	e, err := r.queryable(view)
	if err != nil {
		return nil, nil, err
	}
	return e.scan(rng)
}

func (e *engine) scan(rng ScanRange) ([]Entry, Position, error) {
	if _, ok := e.v.servedKV(); !ok {
		return nil, nil, fmt.Errorf("%w: view %q is windowed; use Windows", ErrNotServed, e.v.name)
	}
	snap := e.rt.cfg.State.NewSnapshot()
	defer snap.Close()
	var all []Entry
	pos := Position{}
	for _, t := range e.servedTasks() {
		if rng.Partitions != nil && !slices.Contains(rng.Partitions, t.partition) {
			continue
		}
		kv := t.served.(*state.KV)
		if off, ok, err := kv.Offset(snap); err == nil && ok {
			pos[t.partition] = off
		}
		got, err := scanPartition(kv, snap, rng.Prefix, rng.Start, rng.End, rng.Limit)
		if err != nil {
			return nil, nil, err
		}
		all = append(all, got...)
	}
	slices.SortFunc(all, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	if rng.Limit > 0 && len(all) > rng.Limit {
		all = all[:rng.Limit]
	}
	return all, pos, nil
}

func scanPartition(kv *state.KV, r state.Reader, prefix, start, end string, limit int) ([]Entry, error) {
	lo := max(prefix, start)
	var hi []byte
	if end != "" {
		hi = []byte(end)
	}
	it, err := kv.Range(r, []byte(lo), hi)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []Entry
	for it.Next() && (limit <= 0 || len(out) < limit) {
		if !bytes.HasPrefix(it.Key(), []byte(prefix)) {
			break
		}
		out = append(out, Entry{Key: string(it.Key()), Value: bytes.Clone(it.Value())})
	}
	return out, it.Err()
}

// WindowValue is one window of a key in a windowed view.
type WindowValue struct {
	Window
	Value []byte
}

// Windows returns the windows of key in a windowed view whose start is in [from, to], in
// start order, and the position of the key's partition.
func (r *Runtime) Windows(ctx context.Context, view Name, key string, from, to time.Time) ([]WindowValue, Position, error) {
	e, err := r.queryable(view)
	if err != nil {
		return nil, nil, err
	}
	return e.windowsOf(ctx, key, from, to)
}

func (e *engine) windowsOf(ctx context.Context, key string, from, to time.Time) ([]WindowValue, Position, error) {
	if !e.v.Windowed() {
		return nil, nil, fmt.Errorf("%w: view %q is not windowed; use Get", ErrNotServed, e.v.name)
	}
	p := partition.For([]byte(key), e.subParts[e.v.served.sub.id])
	t, err := e.owned(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	snap := e.rt.cfg.State.NewSnapshot()
	defer snap.Close()
	w := t.served.(*state.Window)
	pos := Position{}
	if off, ok, err := w.Offset(snap); err == nil && ok {
		pos[p] = off
	}
	it, err := w.Fetch(snap, []byte(key), from, to)
	if err != nil {
		return nil, nil, err
	}
	defer it.Close()
	var out []WindowValue
	for it.Next() {
		v := bytes.Clone(it.Value())
		out = append(out, WindowValue{Window: e.v.window(it.Start().UnixMilli(), v), Value: v})
	}
	return out, pos, it.Err()
}

// Subscribe delivers the changes of the view's partitions owned here, after the per-partition
// positions in after (nil: only changes from now on). buffer bounds the changes held for a
// slow reader (default 1024).
func (r *Runtime) Subscribe(ctx context.Context, view Name, after Position, buffer int) (*Subscription, error) {
	e, err := r.queryable(view)
	if err != nil {
		return nil, err
	}
	if buffer <= 0 {
		buffer = 1024
	}
	return e.subscribe(ctx, after, buffer)
}

// Owners maps each partition of a view's served store to the advertised HTTP address of the
// instance that owns it, from the view's consumer group (members without an address map to
// ""). Partitions the group gives this instance are left out: its tasks say which it has.
func (r *Runtime) Owners(ctx context.Context, view Name) (map[int32]string, error) {
	e, err := r.queryable(view)
	if err != nil {
		return nil, err
	}
	return e.owners(ctx)
}

func (e *engine) owner(ctx context.Context, p int32) (string, error) {
	m, err := e.owners(ctx)
	return m[p], err
}

func (e *engine) owners(ctx context.Context) (map[int32]string, error) {
	adm, err := e.waitClient() // a client per call would cost a connection and a metadata round trip
	if err != nil {
		return nil, err
	}
	groups, err := adm.DescribeGroups(ctx, e.group)
	if err != nil {
		return nil, fmt.Errorf("views: view %q: describe group %s: %w", e.v.name, e.group, err)
	}
	var src string
	for _, s := range e.v.served.sub.sources {
		src = e.env.resolve(s.topic)
	}
	out := map[int32]string{}
	self := clientIDPrefix + e.rt.cfg.AdvertiseAddr
	for _, m := range groups[e.group].Members {
		assigned, ok := m.Assigned.AsConsumer()
		// This instance's own partitions are known from its tasks, not from the group: one
		// the group gives it that its engine has not taken yet (or its dead predecessor's,
		// on the same address) has no other owner to send a read to.
		if !ok || m.ClientID == self {
			continue
		}
		for _, t := range assigned.Topics {
			if t.Topic != src {
				continue
			}
			for _, p := range t.Partitions {
				out[p] = strings.TrimPrefix(m.ClientID, clientIDPrefix)
			}
		}
	}
	return out, nil
}
