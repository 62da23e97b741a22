package views

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/tarnhq/tarn/cdc"
	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Side inputs are topics a view reads outside its consumer group, by partition, so that it
// controls when their records are applied relative to the stream records of a task:
//
//   - a co-partitioned table ([NewCoTable]): partition p of the table topic is kept in a
//     changelogged store of task p, caught up to the topic's end before the task joins its
//     first record, then merged with the stream in time order;
//   - a followed topic ([Follow], [NewGlobalTable]): every partition, on every instance,
//     applied before each batch up to the end it had when the batch was polled.
//
// The reading itself is in sidereader.go.

// TableTopic names a table topic for side inputs: any compacted topic keyed like the table
// ([TopicTable]) or a CDC table topic ([CDCTableTopic]).
type TableTopic struct{ ref topicRef }

// TopicTable names the compacted topic topicName as a table.
func TopicTable(topicName string) TableTopic { return TableTopic{ref: topicRef{literal: topicName}} }

// CDCTableTopic names the CDC table topic of schema.table, `<app>.cdc.<schema>.<table>`.
func CDCTableTopic(schema, table string) TableTopic {
	return TableTopic{ref: topicRef{cdcSchema: schema, cdcTable: table}}
}

func (t TableTopic) sourceTopics() []topicRef { return []topicRef{t.ref} }

// String names the topic as the view's graph does (the app prefix is not known yet).
func (t TableTopic) String() string { return t.ref.String() }

// viewExt is what a view declares for side inputs and processor steps.
type viewExt struct {
	coTables []*coTableSpec
	follows  []*followSpec
	// like maps a repartition step to the topic whose partition count it takes.
	like map[string]topicRef
	// sideTopics guards against reading one topic as two side inputs of a view: a partition
	// can be consumed only once by the view's side reader.
	sideTopics map[topicRef]string
}

// coTableSpec is one co-partitioned table of a view.
type coTableSpec struct {
	step  string
	ref   topicRef
	sub   *subtopology
	store *storeSpec
	// valid reports whether a record value decodes, so that a bad table record goes to the
	// dead-letter topic when it arrives rather than failing each lookup.
	valid func(raw []byte) error
}

// followSpec is one followed topic of a view.
type followSpec struct {
	step      string
	ref       topicRef
	fromStart bool
	apply     func(c *FollowContext, r *kgo.Record) error
}

// sideEnv is the per-runtime state of one view that [Local] hands out.
type sideEnv struct {
	mu    sync.Mutex
	local map[string]any
}

func (b *Builder) sideTopic(step string, ref topicRef) {
	ext := &b.view.ext
	if ext.sideTopics == nil {
		ext.sideTopics = map[topicRef]string{}
	}
	if prev, ok := ext.sideTopics[ref]; ok {
		b.fail(step, "%s is already read by step %q; a view reads a table topic as one side input", ref, prev)
		return
	}
	ext.sideTopics[ref] = step
}

// CoPartition repartitions s by its current keys through `<app>.<view>.v<N>.repartition.<step>`,
// created with the partition count of table, so that the records of a key meet partition
// partition.For(key) of the table in one task. The record timestamp carries the event time.
func CoPartition[V any](s *Stream[V], step string, codec Codec[V], table TableTopic) *Stream[V] {
	b := s.b
	b.step("copartition", step)
	if codec == nil {
		b.fail(step, "codec is nil; use views.JSON[T]()")
		codec = JSON[V]()
	}
	ext := &b.view.ext
	if ext.like == nil {
		ext.like = map[string]topicRef{}
	}
	ext.like[step] = table.ref
	b.describe("copartition %s like %s", step, table.ref)
	return repartition(s, step, codec)
}

// CoTable is a co-partitioned table: task p of the stream it was attached to keeps partition
// p of the table topic in a store named after the step (changelogged like every store).
//
// Time: when a task starts, its copy is caught up to the end the table topic had then, before
// the task joins its first record, so a restart or a new instance causes no false misses.
// That catch-up is written and changelogged one fetch at a time, outside the batch and its
// transaction, so a large table never sits whole in one write set.
// Before each batch, the copy reads every table record that was in the topic when the batch
// was polled. A table record is then applied before the first stream record whose time is at
// or after the table record's timestamp (Kafka record time; the CDC source's write time for
// CDC topics), so a stream record sees the table as of its own time, as far as the table
// topic already held the change when the record was polled: a change written to the table
// topic after the stream record was polled is not seen by it, even if its timestamp is
// earlier. At most [MaxTableLead] fetched changes wait for the stream's time; beyond that the
// oldest are applied anyway (the table runs ahead of a stream that lags far behind it).
type CoTable[T any] struct {
	spec  *coTableSpec
	codec Codec[T]
}

// MaxTableLead bounds the table changes of one partition held back until the stream's time
// reaches theirs.
const MaxTableLead = 10000

// NewCoTable attaches the table topic to s's sub-topology. s must be keyed by the table's key
// and co-partitioned with it: read straight from a topic with the table's partition count
// (checked at start, [ErrCoPartition] naming both topics and counts), or repartitioned with
// [CoPartition].
func NewCoTable[T, V any](s *Stream[V], step string, table TableTopic, codec Codec[T]) *CoTable[T] {
	b := s.b
	b.step("cotable", step)
	if codec == nil {
		b.fail(step, "codec is nil; use views.JSON[T]()")
		codec = JSON[T]()
	}
	if s.KeyChanged() {
		b.fail(step, "the stream's keys were changed by step %q; repartition it with views.CoPartition before joining a table", s.rekeyed)
	}
	b.sideTopic(step, table.ref)
	spec := &coTableSpec{step: step, ref: table.ref, sub: s.sub, store: b.newStore(s.sub, step, false),
		valid: func(raw []byte) error { _, err := codec.Decode(raw); return err }}
	b.view.ext.coTables = append(b.view.ext.coTables, spec)
	b.describe("cotable %s %s codec=%s", step, table.ref, codec.Name())
	return &CoTable[T]{spec: spec, codec: codec}
}

// Keys of a co-table store: rows under rowPrefix+key, the applied table offset under posKey.
var (
	rowPrefix = []byte{'r'}
	posKey    = []byte{'p'}
)

// Get returns the row of key as of the time of the record c is handling (see [CoTable]). It
// fails when called outside a record of the stream the table was attached to.
func (c *CoTable[T]) Get(ctx Context, key string) (T, bool, error) {
	var zero T
	_, t, ts := ctx.scope()
	co := coPartOf(t, c.spec)
	if co == nil {
		return zero, false, fmt.Errorf("views: co-table %q read outside a task of the stream it was attached to", c.spec.step)
	}
	if err := co.settle(ts); err != nil {
		return zero, false, err
	}
	if r, ok := co.rows[key]; ok {
		v, _ := r.v.(T)
		return v, r.found, nil
	}
	raw, ok, err := co.kv().Get(append(rowPrefix[:1:1], key...))
	if err != nil {
		return zero, false, err
	}
	var v T
	if ok {
		if v, err = c.codec.Decode(raw); err != nil {
			return zero, false, fmt.Errorf("views: co-table %q key %q: %w", c.spec.step, key, err)
		}
	}
	co.remember(key, v, ok)
	return v, ok, nil
}

// maxDecodedRows bounds the decoded rows a co-table partition keeps.
const maxDecodedRows = 10000

// decoded is a row as Get last decoded it (or its absence).
type decoded struct {
	v     any
	found bool
}

func (co *coPart) remember(key string, v any, found bool) {
	if co.rows == nil || len(co.rows) >= maxDecodedRows {
		co.rows = map[string]decoded{}
	}
	co.rows[key] = decoded{v: v, found: found}
}

// coPart is one co-table partition of one task: the fetched table records not yet applied.
type coPart struct {
	spec *coTableSpec
	t    *task
	// barrier: records below this offset (the end at the task's start) are applied whatever
	// their time.
	barrier int64
	pending []*kgo.Record
	// applied are the records applied in the current batch; if the batch is discarded they
	// are pending again.
	applied []*kgo.Record
	dirty   func(*coPart)
	// rows caches decoded rows of the store; every write to a key drops its entry.
	rows map[string]decoded
	// catchUp takes the records below the barrier, outside the batch: the side reader
	// commits them after each fetch (flushCatchUp), so that a large table costs one fetch of
	// memory, not a write set of its whole partition in the task's first batch.
	// Its writes (catchUp.w) are a write set of their own, not the task's.
	catchUp kvAdapter
}

func coPartOf(t *task, spec *coTableSpec) *coPart {
	if t == nil {
		return nil
	}
	co, _ := t.state["\x00cotable:"+spec.step].(*coPart)
	return co
}

func (co *coPart) kv() kvStore { return co.t.kv[co.spec.store.index] }

// receive applies a fetched table record below the barrier to the catch-up writes, and
// queues any other, applying what may be applied at once.
func (co *coPart) receive(r *kgo.Record) error {
	if r.Offset < co.barrier && len(co.pending) == 0 {
		return co.apply(co.catchUp, r)
	}
	co.pending = append(co.pending, r)
	return co.settle(minTime)
}

// flushCatchUp makes the catch-up writes durable: their changelog records are sent with cl,
// outside any transaction, then the writes are applied. A crash in between repeats them:
// they are the table's own rows up to the barrier, so writing them twice changes nothing.
// A failure leaves the store behind the side reader's position, so the engine must drop and
// restore its tasks (errRecreate).
func (co *coPart) flushCatchUp(ctx context.Context, cl *kgo.Client) error {
	txn := co.catchUp.w.txn
	if txn == nil {
		return nil
	}
	co.catchUp.w.txn = nil
	if err := txn.Produce(ctx, cl); err != nil {
		txn.Discard()
		if topic.IsTooLarge(err) {
			// A table row above the store changelog's limit: redoing would fail again. Catch-up
			// writes are not size-checked (there is no input record to dead-letter), so this
			// stops the view with the fix rather than retrying for ever.
			return refusedForSize(co.t.env.view.name, co.t.env.limits.Max(), fmt.Errorf("co-table %q catch-up: %w", co.spec.step, err))
		}
		return fmt.Errorf("%w: co-table %q catch-up: %w", errRecreate, co.spec.step, err)
	}
	if err := txn.Apply(); err != nil {
		return fmt.Errorf("%w: co-table %q catch-up: %w", errRecreate, co.spec.step, err)
	}
	return nil
}

// settle applies the pending records that a stream record at time ts must see: those below
// the barrier, those not later than ts, and the oldest beyond MaxTableLead.
func (co *coPart) settle(ts int64) error {
	for len(co.pending) > 0 {
		r := co.pending[0]
		if r.Offset >= co.barrier && r.Timestamp.UnixMilli() > ts && len(co.pending) <= MaxTableLead {
			return nil
		}
		co.pending = co.pending[1:]
		if err := co.apply(co.kv(), r); err != nil {
			return err
		}
		if len(co.applied) == 0 {
			co.dirty(co)
		}
		co.applied = append(co.applied, r)
	}
	return nil
}

// apply writes one table record to the store through kv with the offset it reaches.
func (co *coPart) apply(kv kvStore, r *kgo.Record) error {
	delete(co.rows, string(r.Key))
	switch {
	case cdc.IsTruncate(r):
		clear(co.rows)
		if err := truncateRows(kv); err != nil {
			return err
		}
	case r.Value == nil:
		if err := kv.Delete(append(rowPrefix[:1:1], r.Key...)); err != nil {
			return err
		}
	default:
		if err := co.spec.valid(r.Value); err != nil {
			co.t.deadLetterOf(r, co.spec.step, "decode", err.Error())
			break
		}
		if err := kv.Set(append(rowPrefix[:1:1], r.Key...), r.Value); err != nil {
			return err
		}
	}
	return kv.Set(posKey, binary.BigEndian.AppendUint64(nil, uint64(r.Offset)))
}

// truncateRows deletes every row of a co-table partition.
func truncateRows(kv kvStore) error {
	var keys [][]byte
	err := kv.Scan(func(k, _ []byte) error {
		if len(k) > 0 && k[0] == rowPrefix[0] {
			keys = append(keys, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := kv.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// committed forgets the records applied in a batch that committed.
func (co *coPart) committed() { co.applied = co.applied[:0] }

// discarded makes the records applied in a discarded batch pending again.
func (co *coPart) discarded() {
	clear(co.rows) // they may hold rows of the dropped writes
	co.pending = append(append([]*kgo.Record(nil), co.applied...), co.pending...)
	co.applied = co.applied[:0]
}

// FollowContext is what a [Follow] function sees: the view's per-runtime state ([Local]) and
// the partition count of the followed topic.
type FollowContext struct {
	e          *env
	out        sink
	step       string
	partitions int32
}

func (c *FollowContext) scope() (*env, *task, int64) { return c.e, nil, minTime }

// Partitions is the partition count of the followed topic.
func (c *FollowContext) Partitions() int32 { return c.partitions }

// DeadLetter sends r, a record of the followed topic, to the dead-letter topic and counts it.
func (c *FollowContext) DeadLetter(r *kgo.Record, reason, detail string) {
	newTask(c.e, nil, r.Partition, c.out).deadLetterOf(r, c.step, reason, detail)
}

// Follow reads every partition of topic on every instance and calls apply with each record
// (control records excluded), from the start of the topic or, if fromStart is false, from
// its end when the view starts. Before each batch the view applies every record that was in
// the topic when the batch was polled, so a record polled after a change arrived in the
// topic is processed after apply saw the change. apply runs on the view's goroutine and keeps
// its state with [Local]; an error stops the view.
func Follow(b *Builder, step string, topic TableTopic, fromStart bool, apply func(c *FollowContext, r *kgo.Record) error) {
	b.step("follow", step)
	if apply == nil {
		b.fail(step, "follow function is nil")
		return
	}
	b.sideTopic(step, topic.ref)
	b.view.ext.follows = append(b.view.ext.follows, &followSpec{step: step, ref: topic.ref, fromStart: fromStart, apply: apply})
	b.describe("follow %s %s from-start=%t", step, topic.ref, fromStart)
}

// GlobalTable is a table copied whole to every instance, in memory: for small dimension tables
// (countries, categories) that any record may need, whatever its key. It is loaded from the
// start of its topic before the view's first batch and kept up to date before each batch (see
// [Follow]): it follows processing time, not the time of the records that read it.
type GlobalTable[T any] struct {
	step  string
	codec Codec[T]
}

// globalRows is one instance's copy of a global table.
type globalRows[T any] struct{ rows map[string]T }

// NewGlobalTable declares a global table read from topic and decoded with codec; undecodable
// rows go to the dead-letter topic.
func NewGlobalTable[T any](b *Builder, step string, topic TableTopic, codec Codec[T]) *GlobalTable[T] {
	if codec == nil {
		b.fail(step, "codec is nil; use views.JSON[T]()")
		codec = JSON[T]()
	}
	g := &GlobalTable[T]{step: step, codec: codec}
	Follow(b, step, topic, true, g.apply)
	b.describe("global %s codec=%s", step, codec.Name())
	return g
}

func (g *GlobalTable[T]) local(c Context) *globalRows[T] {
	return Local(c, "\x00global:"+g.step, func() *globalRows[T] { return &globalRows[T]{rows: map[string]T{}} })
}

func (g *GlobalTable[T]) apply(c *FollowContext, r *kgo.Record) error {
	rows := g.local(c).rows
	switch {
	case cdc.IsTruncate(r):
		for k := range rows {
			if partition.For([]byte(k), c.partitions) == r.Partition {
				delete(rows, k)
			}
		}
	case r.Value == nil:
		delete(rows, string(r.Key))
	default:
		v, err := g.codec.Decode(r.Value)
		if err != nil {
			c.DeadLetter(r, "decode", err.Error())
			return nil
		}
		rows[string(r.Key)] = v
	}
	return nil
}

// Get returns the row of key in this instance's copy.
func (g *GlobalTable[T]) Get(c Context, key string) (T, bool, error) {
	v, ok := g.local(c).rows[key]
	return v, ok, nil
}

// Len is the number of rows in this instance's copy.
func (g *GlobalTable[T]) Len(c Context) int { return len(g.local(c).rows) }
