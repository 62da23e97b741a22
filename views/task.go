package views

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kvStore is one partition of a key-value store as a task sees it during a batch: reads see
// the batch's own pending writes.
type kvStore interface {
	Get(key []byte) (value []byte, ok bool, err error)
	Set(key, value []byte) error
	Delete(key []byte) error
	// Scan calls fn for every key in order, pending writes included.
	Scan(fn func(key, value []byte) error) error
}

// windowStore is one partition of a windowed store as a task sees it during a batch.
type windowStore interface {
	Get(key []byte, start int64) (value []byte, ok bool, err error)
	// Fetch calls fn for the windows of key with start in [from, to], in start order.
	Fetch(key []byte, from, to int64, fn func(start int64, value []byte) error) error
	Set(key []byte, start int64, value []byte) error
	Delete(key []byte, start int64) error
}

// sink takes the records a task produces: outputs, repartition records and dead letters. The
// runtime sends them with the batch; tests collect them.
type sink interface {
	produce(r *kgo.Record)
	// partitions returns the partition count of a topic the view writes to.
	partitions(topic string) int32
}

// Change is one applied change of a view's queryable store. Value is the JSON value, nil when
// the key (or window) was deleted. Partition and Offset are the position of the change in the
// store's changelog, from which a watcher resumes.
type Change struct {
	Partition int32
	Offset    int64
	Key       string
	// Window is set for windowed views.
	Window *Window
	Value  []byte
	// Last marks the last change of its batch in its partition: a safe resume position.
	Last bool
}

// Window is the time range of one window of a windowed view: [Start, End).
type Window struct {
	Start time.Time
	End   time.Time
}

// task runs one sub-topology for one partition. It is used by one goroutine at a time.
type task struct {
	env       *env
	sub       *subtopology
	partition int32
	kv        []kvStore     // by storeSpec.index; nil for other sub-topologies' stores
	win       []windowStore // likewise
	out       sink
	wm        watermarks
	cur       *kgo.Record // the input record being processed, for dead letters
	// batchNow is the wall clock read once when the runtime hands the task a batch; zero
	// when the task is driven record by record (tests). See wallNow.
	batchNow time.Time
	state    map[string]any
	flushers []func() error
	changes  []Change
}

// env is what tasks of one view in one runtime share.
type env struct {
	app     string
	view    *View
	now     func() time.Time
	idle    time.Duration
	metrics *metrics
	topics  map[topicRef]string
	side    sideEnv // per-runtime state of processor steps (Local)
	// limits are the largest records the view's topics take; nil (tests) means no limit.
	limits *topic.Limits
}

func newEnv(app string, v *View, now func() time.Time, idle time.Duration, m *metrics) *env {
	e := &env{app: app, view: v, now: now, idle: idle, metrics: m, topics: map[topicRef]string{}}
	for _, s := range v.subs {
		for _, src := range s.sources {
			e.topics[src.topic] = src.topic.resolve(app, v)
		}
	}
	return e
}

// resolve returns the full name of a topic the view reads.
func (e *env) resolve(ref topicRef) string { return e.topics[ref] }

func newTask(e *env, sub *subtopology, partition int32, out sink) *task {
	n := len(e.view.stores)
	return &task{
		env: e, sub: sub, partition: partition, out: out,
		kv: make([]kvStore, n), win: make([]windowStore, n),
		wm:    watermarks{idle: e.idle, parts: map[string]*partitionTime{}},
		state: map[string]any{},
	}
}

// wallNow is the wall clock for watermark idleness, read once per batch: idle timeouts are
// minutes, and a clock read per record was 3% of a simple view's CPU.
func (t *task) wallNow() time.Time {
	if t.batchNow.IsZero() {
		return t.env.now()
	}
	return t.batchNow
}

// process runs one input record through the sub-topology.
func (t *task) process(src *sourceNode, r *kgo.Record) error {
	t.cur = r
	defer func() { t.cur = nil }()
	return src.handle(t, r)
}

// flush writes operators' per-batch caches to the stores; the runtime calls it at the end of a
// batch before the stores' writes are produced.
func (t *task) flush() error {
	// Processor steps finish their batch first: what they emit feeds the caches below.
	if err := t.drain(); err != nil {
		return err
	}
	// By index: a cache fed only by an upstream flush (an aggregation after
	// WindowedTable.ToStream) registers its flusher during this loop, on its first batch, and
	// must still be flushed in that batch. Flushers run in the order they were made, so
	// upstream ones first.
	for i := 0; i < len(t.flushers); i++ {
		if err := t.flushers[i](); err != nil {
			return err
		}
	}
	return nil
}

// taskState returns an operator's per-task state, made by mk on first use.
func taskState[T any](t *task, step string, mk func() T) T {
	if s, ok := t.state[step]; ok {
		return s.(T)
	}
	s := mk()
	t.state[step] = s
	return s
}

// deadLetter sends the current input record to the dead-letter topic with the reason and the
// step that refused it, and counts it.
func (t *task) deadLetter(step, reason, detail string, extra ...kgo.RecordHeader) {
	r := t.cur
	rec := t.deadLetterRecord(step, reason, detail, r.Key, r.Value, extra...)
	rec.Timestamp = r.Timestamp
	t.out.produce(rec)
	t.env.metrics.deadLetter(string(t.env.view.name), reason)
}

// deadLetterRecord builds a dead letter of the current input record, or of key alone when
// there is none (a write in a batch's flush). A value that would make the dead letter too
// large for its topic is left out and its size given in the "tarn.value-bytes" header: the
// dead letter of a large record must not be refused in turn.
func (t *task) deadLetterRecord(step, reason, detail string, key, value []byte, extra ...kgo.RecordHeader) *kgo.Record {
	dlq := t.env.dlqTopic()
	rec := &kgo.Record{Topic: dlq, Key: key, Value: value}
	rec.Headers = append(rec.Headers,
		kgo.RecordHeader{Key: "tarn.reason", Value: []byte(reason)},
		kgo.RecordHeader{Key: "tarn.detail", Value: []byte(detail)},
		kgo.RecordHeader{Key: "tarn.view", Value: []byte(t.env.view.name)},
		kgo.RecordHeader{Key: "tarn.step", Value: []byte(step)},
	)
	p := t.partition
	if r := t.cur; r != nil {
		rec.Headers = append(rec.Headers,
			kgo.RecordHeader{Key: "tarn.topic", Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: "tarn.partition", Value: []byte(strconv.Itoa(int(r.Partition)))},
			kgo.RecordHeader{Key: "tarn.offset", Value: []byte(strconv.FormatInt(r.Offset, 10))},
		)
		p = r.Partition
	}
	rec.Headers = append(rec.Headers, extra...)
	if limit := t.env.limits.Of(dlq); topic.RecordSize(rec) > limit {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "tarn.value-bytes", Value: []byte(strconv.Itoa(len(value)))})
		rec.Value = nil
		if len(rec.Key) > limit/2 {
			rec.Key = rec.Key[:limit/2]
		}
	}
	rec.Partition = p % t.out.partitions(dlq)
	return rec
}

// mayNotFit is the cheap test before fits: whether size is above the smallest limit of any
// topic, so that writes and records of common sizes build no topic name.
func (t *task) mayNotFit(size int) bool { return size > t.env.limits.Min() }

// fits reports whether a record of size bytes fits topic target; when it does not, it
// dead-letters the current input record (or key, when there is none) with reason
// "too-large", the size and the limit, without its value, and counts it. The record itself
// is then not written: the view goes on without it.
func (t *task) fits(step, target string, key []byte, size int) bool {
	limit := t.env.limits.Of(target)
	if size <= limit {
		return true
	}
	if t.cur != nil {
		key = t.cur.Key
	}
	detail := fmt.Sprintf("a record of %d bytes for topic %s is above its limit of %d bytes (MaxRecordBytes, or the topic's max.message.bytes)",
		size, target, limit)
	rec := t.deadLetterRecord(step, topic.ReasonTooLarge, detail, key, nil,
		kgo.RecordHeader{Key: "tarn.size", Value: []byte(strconv.Itoa(size))},
		kgo.RecordHeader{Key: "tarn.limit", Value: []byte(strconv.Itoa(limit))},
		kgo.RecordHeader{Key: "tarn.target", Value: []byte(target)},
	)
	if t.cur != nil {
		rec.Timestamp = t.cur.Timestamp
	}
	t.out.produce(rec)
	t.env.metrics.deadLetter(string(t.env.view.name), topic.ReasonTooLarge)
	return false
}

// watermarks tracks event time per input topic-partition of a task.
type watermarks struct {
	idle  time.Duration
	parts map[string]*partitionTime
}

type partitionTime struct {
	max      int64
	lastSeen time.Time
}

// observe records an event time seen on topic at wall time now.
func (w *watermarks) observe(topic string, ts int64, now time.Time) {
	p := w.parts[topic]
	if p == nil {
		p = &partitionTime{max: math.MinInt64}
		w.parts[topic] = p
	}
	p.max = max(p.max, ts)
	p.lastSeen = now
}

// current is the task's watermark: the smallest watermark of its input partitions that are not
// idle, so that one quiet input cannot hold windows open forever; when all are idle, the
// largest.
func (w *watermarks) current(now time.Time) int64 {
	low, high := int64(math.MaxInt64), int64(math.MinInt64)
	for _, p := range w.parts {
		high = max(high, p.max)
		if w.idle > 0 && now.Sub(p.lastSeen) > w.idle {
			continue
		}
		low = min(low, p.max)
	}
	if low == math.MaxInt64 {
		return high
	}
	return low
}

func (e *env) dlqTopic() string { return topic.DLQ(e.app) }
