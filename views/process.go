package views

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// This file is the extension API on which operators outside this package (the joins of
// package enrich) are built: a processor step with its own changelogged stores, emission,
// time and dead letters, and per-runtime shared state.

// StoreDecl declares a store that a [Process] step keeps in every task of its sub-topology.
// Like every store, it is logged to its changelog `<app>.<view>.v<N>.<name>.changelog` and
// restored before the task processes records. Make one with [KVStore] or [WindowStore].
type StoreDecl struct {
	name      string
	windowed  bool
	span      time.Duration
	grace     time.Duration
	retention time.Duration
}

// KVStore declares a key-value store called name (a step name: unique in the view).
func KVStore(name string) StoreDecl { return StoreDecl{name: name} }

// WindowStore declares a windowed store called name whose entries (key, start) are kept until
// the store's stream time (the largest start written) passes start + span + grace. Writing an
// entry older than that fails with state.ErrExpired.
func WindowStore(name string, span, grace time.Duration) StoreDecl {
	return StoreDecl{name: name, windowed: true, span: span, grace: grace}
}

// KV is a key-value store partition as a processor sees it during a batch: reads see the
// batch's pending writes, and writes become durable with the batch.
type KV interface {
	Get(key []byte) (value []byte, ok bool, err error)
	Set(key, value []byte) error
	Delete(key []byte) error
	// Scan calls fn for every key in order.
	Scan(fn func(key, value []byte) error) error
	// Range calls fn for the keys in [from, to) in order; a nil to means no upper bound.
	Range(from, to []byte, fn func(key, value []byte) error) error
}

// WindowKV is a windowed store partition as a processor sees it during a batch.
type WindowKV interface {
	Get(key []byte, start int64) (value []byte, ok bool, err error)
	// Fetch calls fn for the entries of key with start in [from, to] (Unix ms), in start order.
	Fetch(key []byte, from, to int64, fn func(start int64, value []byte) error) error
	Set(key []byte, start int64, value []byte) error
	Delete(key []byte, start int64) error
}

// Range makes the runtime's key-value stores usable as [KV].
func (a kvAdapter) Range(from, to []byte, fn func(k, v []byte) error) error {
	it, err := a.kv.Range(a.w.tx(), from, to)
	if err != nil {
		return err
	}
	for it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			return errors.Join(err, it.Close())
		}
	}
	return errors.Join(it.Err(), it.Close())
}

// scanRange gives a store without range reads (the test driver's) Range by scanning.
type scanRange struct{ kvStore }

func (s scanRange) Range(from, to []byte, fn func(k, v []byte) error) error {
	return s.Scan(func(k, v []byte) error {
		if bytes.Compare(k, from) >= 0 && (to == nil || bytes.Compare(k, to) < 0) {
			return fn(k, v)
		}
		return nil
	})
}

// Processor is a user-defined step: Record is called for every record of the input stream,
// Flush (optional) at the end of every batch of a task that had records, before the batch's
// store writes are produced. Flush may emit: that is how a step that started work for
// records (such as asynchronous lookups) finishes it within the batch, so that the input
// offsets are committed only after its effects. Both run on the task's goroutine; they must
// not keep the [ProcessContext] beyond the call.
type Processor[V, W any] struct {
	// Stores are the stores the step keeps, reached with [ProcessContext.KV] and
	// [ProcessContext.Window] by name.
	Stores []StoreDecl
	// Record handles one input record at time ts. Required.
	Record func(pc *ProcessContext[W], key string, v V, ts time.Time) error
	// Flush finishes the batch. Optional.
	Flush func(pc *ProcessContext[W]) error
}

// Process adds a processor step to s and returns the stream of what it emits. The step's
// stores belong to s's sub-topology; name them after the step so that they stay unique.
func Process[V, W any](s *Stream[V], step string, p Processor[V, W]) *Stream[W] {
	b := s.b
	b.step("process", step)
	if p.Record == nil {
		b.fail(step, "processor has no Record function")
	}
	op := &procOp[W]{step: step, stores: map[string]*storeSpec{}}
	for _, d := range p.Stores {
		op.declare(b, s.sub, d)
	}
	b.describe("process %s %s->%s", step, typeName[V](), typeName[W]())
	out := derive[V, W](s)
	op.out = out.p
	if p.Record == nil {
		return out
	}
	s.p.to(func(t *task, key string, v V, ts int64) error {
		pc := &ProcessContext[W]{t: t, op: op, ts: ts, rec: t.cur}
		if p.Flush != nil {
			op.register(t, p.Flush)
		}
		return p.Record(pc, key, v, time.UnixMilli(ts))
	})
	return out
}

// procOp is what a Process step shares between its tasks: its stores and output port.
type procOp[W any] struct {
	step   string
	stores map[string]*storeSpec
	out    *port[W]
}

func (op *procOp[W]) declare(b *Builder, sub *subtopology, d StoreDecl) {
	b.step("store", d.name)
	if d.windowed && (d.span < 0 || d.grace < 0) {
		b.fail(op.step, "window store %q has a negative span or grace", d.name)
	}
	st := b.newStore(sub, d.name, d.windowed)
	st.span, st.grace, st.retention = d.span, d.grace, d.retention
	op.stores[d.name] = st
	b.describe("store %s windowed=%t span=%s grace=%s", d.name, d.windowed, d.span, d.grace)
}

// register adds the step's Flush to the task's drain list once.
func (op *procOp[W]) register(t *task, flush func(*ProcessContext[W]) error) {
	d := drainOf(t)
	if d.seen[op.step] {
		return
	}
	d.seen[op.step] = true
	d.fns = append(d.fns, func() error { return flush(&ProcessContext[W]{t: t, op: op, ts: noTime}) })
}

// noTime marks a ProcessContext that is not handling a record (a Flush).
const noTime = minTime

// drains holds the Flush functions of a task's processor steps.
type drains struct {
	fns   []func() error
	seen  map[string]bool
	emits int // records emitted by processor steps, to know when another pass is needed
	// batch is the BatchLocal state, dropped when the batch's drain ends.
	batch map[string]any
}

func drainOf(t *task) *drains {
	return taskState(t, "\x00drains", func() *drains { return &drains{seen: map[string]bool{}} })
}

// maxDrainPasses bounds the passes over Flush functions: a chain of asynchronous steps needs
// one pass per step, a step that keeps emitting from Flush without end is a bug.
const maxDrainPasses = 64

// drain runs the processor steps' Flush functions until a pass emits nothing: a Flush may
// feed a later step whose Flush then has work of its own.
func (t *task) drain() error {
	d, ok := t.state["\x00drains"].(*drains)
	if !ok {
		return nil
	}
	defer clear(d.batch)
	for range maxDrainPasses {
		before, n := d.emits, len(d.fns)
		for i := 0; i < len(d.fns); i++ {
			if err := d.fns[i](); err != nil {
				return err
			}
		}
		if d.emits == before && len(d.fns) == n {
			return nil
		}
	}
	return fmt.Errorf("views: view %q: processor Flush functions still emitted after %d passes", t.env.view.name, maxDrainPasses)
}

// ProcessContext is what a [Processor] sees of its task while it handles one record (or one
// Flush). It is valid only during that call.
type ProcessContext[W any] struct {
	t   *task
	op  *procOp[W]
	ts  int64
	rec *kgo.Record
}

func (pc *ProcessContext[W]) scope() (*env, *task, int64) { return pc.t.env, pc.t, pc.ts }

// Emit sends a record to the step's output stream.
func (pc *ProcessContext[W]) Emit(key string, v W, ts time.Time) error {
	drainOf(pc.t).emits++
	return pc.op.out.emit(pc.t, key, v, ts.UnixMilli())
}

// Time is the time of the record being handled; the zero time in Flush.
func (pc *ProcessContext[W]) Time() time.Time {
	if pc.ts == noTime {
		return time.Time{}
	}
	return time.UnixMilli(pc.ts)
}

// Watermark is the task's watermark: the smallest event time over its input partitions that
// are not idle (see the package doc).
func (pc *ProcessContext[W]) Watermark() time.Time {
	return time.UnixMilli(pc.t.wm.current(pc.t.wallNow()))
}

// Partition is the task's partition.
func (pc *ProcessContext[W]) Partition() int32 { return pc.t.partition }

// Now is the runtime's wall clock.
func (pc *ProcessContext[W]) Now() time.Time { return pc.t.env.now() }

// View names the view, for messages.
func (pc *ProcessContext[W]) View() Name { return pc.t.env.view.name }

// KV returns the key-value store called name that the step declared. An undeclared name (or
// a windowed store) gives a store whose every call fails with an error naming it.
func (pc *ProcessContext[W]) KV(name string) KV {
	if st := pc.op.stores[name]; st != nil && !st.windowed {
		switch kv := pc.t.kv[st.index].(type) {
		case KV:
			return kv
		case kvStore:
			return scanRange{kv}
		}
	}
	return missingStore{view: pc.t.env.view.name, step: pc.op.step, name: name}
}

// Window returns the windowed store called name that the step declared, like [ProcessContext.KV].
func (pc *ProcessContext[W]) Window(name string) WindowKV {
	if st := pc.op.stores[name]; st != nil && st.windowed {
		return pc.t.win[st.index]
	}
	return missingWindow{missingStore{view: pc.t.env.view.name, step: pc.op.step, name: name}}
}

// Input is the record being handled, to hand to [ProcessContext.DeadLetterInput] later in the
// batch (after an asynchronous step failed); nil in Flush.
func (pc *ProcessContext[W]) Input() *InputRecord {
	if pc.rec == nil {
		return nil
	}
	return &InputRecord{r: pc.rec}
}

// InputRecord is an input record held for a dead letter sent later in the same batch.
type InputRecord struct{ r *kgo.Record }

// DeadLetter sends the record being handled to the dead-letter topic with reason (a short
// word such as "late" or "lookup") and detail, and counts it; the view keeps going.
func (pc *ProcessContext[W]) DeadLetter(reason, detail string, headers ...kgo.RecordHeader) {
	pc.DeadLetterInput(pc.Input(), reason, detail, headers...)
}

// DeadLetterInput sends in, a record of this batch, to the dead-letter topic like
// [ProcessContext.DeadLetter]. A nil in (Flush has no record) sends nothing and is logged as
// an error of the step by the caller's returned error instead.
func (pc *ProcessContext[W]) DeadLetterInput(in *InputRecord, reason, detail string, headers ...kgo.RecordHeader) {
	if in == nil {
		return
	}
	pc.t.deadLetterOf(in.r, pc.op.step, reason, detail, headers...)
}

// deadLetterOf sends r (not necessarily the current record) to the dead-letter topic.
func (t *task) deadLetterOf(r *kgo.Record, step, reason, detail string, headers ...kgo.RecordHeader) {
	cur := t.cur
	t.cur = r
	t.deadLetter(step, reason, detail, headers...)
	t.cur = cur
}

// missingStore answers every call with an error naming the store that was not declared.
type missingStore struct {
	view       Name
	step, name string
}

func (m missingStore) err() error {
	return fmt.Errorf("views: view %q step %q: no store %q of that kind was declared in Processor.Stores", m.view, m.step, m.name)
}

func (m missingStore) Get([]byte) ([]byte, bool, error)                       { return nil, false, m.err() }
func (m missingStore) Set([]byte, []byte) error                               { return m.err() }
func (m missingStore) Delete([]byte) error                                    { return m.err() }
func (m missingStore) Scan(func([]byte, []byte) error) error                  { return m.err() }
func (m missingStore) Range([]byte, []byte, func([]byte, []byte) error) error { return m.err() }

// missingWindow is missingStore for windowed stores, whose methods have other signatures.
type missingWindow struct{ missingStore }

func (m missingWindow) Get([]byte, int64) ([]byte, bool, error) { return nil, false, m.err() }
func (m missingWindow) Set([]byte, int64, []byte) error         { return m.err() }
func (m missingWindow) Delete([]byte, int64) error              { return m.err() }
func (m missingWindow) Fetch([]byte, int64, int64, func(int64, []byte) error) error {
	return m.err()
}

// Context is a [ProcessContext] of any output type, or a [FollowContext]: what [Local],
// [CoTable.Get] and [GlobalTable.Get] need of the caller.
type Context interface {
	// scope is the view's runtime state, the task (nil outside a task) and the time of the
	// record being handled (minTime when none).
	scope() (*env, *task, int64)
}

// Local returns the state called name of this view in this runtime, made by mk on first use
// and shared by all the view's tasks here (a cache, a client). The tasks of one batch run in
// parallel ([Config].TaskParallelism), so the state must be safe for concurrent use; per-task
// batch state belongs in [BatchLocal]. Definitions are shared between runtimes, so per-runtime state lives here,
// never in a definition's closures.
func Local[T any](c Context, name string, mk func() T) T {
	e, _, _ := c.scope()
	e.side.mu.Lock()
	defer e.side.mu.Unlock()
	if e.side.local == nil {
		e.side.local = map[string]any{}
	}
	if v, ok := e.side.local[name].(T); ok {
		return v
	}
	v := mk()
	e.side.local[name] = v
	return v
}

// BatchLocal returns the state called name of the task c is handling a record (or a Flush)
// of, made by mk on first use and dropped when the task's batch ends (after its Flush
// functions ran): a cache of what the batch read from its stores, valid because a batch's
// store writes are all made by its own task. A batch that is redone after a failure starts
// without it. Outside a task it makes a new value every call.
func BatchLocal[T any](c Context, name string, mk func() T) T {
	_, t, _ := c.scope()
	if t == nil {
		return mk()
	}
	d := drainOf(t)
	if d.batch == nil {
		d.batch = map[string]any{}
	}
	if v, ok := d.batch[name].(T); ok {
		return v
	}
	v := mk()
	d.batch[name] = v
	return v
}

// Builder returns the builder of the view s belongs to, for operators defined outside this
// package.
func (s *Stream[V]) Builder() *Builder { return s.b }

// KeyChanged reports whether a step since the stream's source changed its keys, so that an
// operator that needs records of one key in one task must repartition first.
func (s *Stream[V]) KeyChanged() bool { return s.rekeyed != "" }

// Fail records a problem of the view being built at step, returned by [Define] wrapping
// [ErrDefinition]: operators defined outside this package report their problems with it.
func (b *Builder) Fail(step string, err error) { b.fail(step, "%v", err) }

// Describe adds a line to the view's graph (and so to its fingerprint): operators defined
// outside this package describe their settings with it.
func (b *Builder) Describe(format string, args ...any) { b.describe(format, args...) }
