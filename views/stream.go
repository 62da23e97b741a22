package views

import (
	"fmt"
	"time"

	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kgo"
)

// port connects an operator to the operators that consume its output.
type port[V any] struct {
	subs []func(t *task, key string, v V, ts int64) error
}

func (p *port[V]) emit(t *task, key string, v V, ts int64) error {
	for _, s := range p.subs {
		if err := s(t, key, v, ts); err != nil {
			return err
		}
	}
	return nil
}

func (p *port[V]) to(f func(t *task, key string, v V, ts int64) error) { p.subs = append(p.subs, f) }

// Stream is an unbounded sequence of keyed records with values of type V.
type Stream[V any] struct {
	b    *Builder
	sub  *subtopology
	p    *port[V]
	srcs []topicRef
	// rekeyed is the step that last changed the key, if any: grouping after it repartitions.
	rekeyed string
}

func (s *Stream[V]) sourceTopics() []topicRef { return s.srcs }

// derive returns a stream fed by s's sub-topology with a new port.
func derive[V, W any](s *Stream[V]) *Stream[W] {
	return &Stream[W]{b: s.b, sub: s.sub, p: &port[W]{}, srcs: s.srcs, rekeyed: s.rekeyed}
}

// SourceOption configures a [Source] or a table source.
type SourceOption interface{ applySource(*sourceConfig) }

type clock int

const (
	clockRecord clock = iota
	clockEvent
	clockProcessing
)

type sourceConfig struct {
	clock     clock
	eventTime any // func(V) time.Time of the source's V
	step      string
}

type sourceOptionFunc func(*sourceConfig)

func (f sourceOptionFunc) applySource(c *sourceConfig) { f(c) }

// EventTime takes each record's event time from its value. The default is the Kafka record
// timestamp (create time or log-append time, as the topic is configured).
func EventTime[V any](f func(V) time.Time) SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.clock, c.eventTime = clockEvent, f })
}

// ProcessingTime uses the wall clock at processing as each record's time.
func ProcessingTime() SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.clock = clockProcessing })
}

// Step names a source (default "source-" followed by its topic, with '.' as '_').
func Step(name string) SourceOption {
	return sourceOptionFunc(func(c *sourceConfig) { c.step = name })
}

// timeOf returns the function giving a record's time in Unix milliseconds.
func timeOf[V any](b *Builder, step string, c sourceConfig) func(t *task, v V, r *kgo.Record) int64 {
	switch c.clock {
	case clockEvent:
		f, ok := c.eventTime.(func(V) time.Time)
		if !ok || f == nil {
			b.fail(step, "EventTime function takes %T, the source's values are %s", c.eventTime, typeName[V]())
			return nil
		}
		return func(_ *task, v V, _ *kgo.Record) int64 { return f(v).UnixMilli() }
	case clockProcessing:
		return func(t *task, _ V, _ *kgo.Record) int64 { return t.env.now().UnixMilli() }
	default:
		return func(_ *task, _ V, r *kgo.Record) int64 { return r.Timestamp.UnixMilli() }
	}
}

func (c sourceConfig) clockName() string {
	return [...]string{"record", "event", "processing"}[c.clock]
}

func sourceConfigOf(topicName string, opts []SourceOption) sourceConfig {
	c := sourceConfig{step: "source-" + sanitize(topicName)}
	for _, o := range opts {
		o.applySource(&c)
	}
	return c
}

// sanitize makes a topic name usable as a step name.
func sanitize(s string) string {
	out := []byte(s)
	for i, c := range out {
		if c == '.' {
			out[i] = '_'
		}
	}
	return string(out)
}

// Source reads the Kafka topic topicName, decoding values with codec. Records that do not
// decode go to the dead-letter topic and are counted; the view keeps going.
func Source[V any](b *Builder, topicName string, codec Codec[V], opts ...SourceOption) *Stream[V] {
	c := sourceConfigOf(topicName, opts)
	b.step("source", c.step)
	if topicName == "" {
		b.fail(c.step, "source topic is empty")
	}
	if codec == nil {
		b.fail(c.step, "codec is nil; use views.JSON[T]()")
		codec = JSON[V]()
	}
	ref := topicRef{literal: topicName}
	b.describe("source %s %s codec=%s time=%s", c.step, ref, codec.Name(), c.clockName())
	return streamFrom(b, b.newSub(), c.step, ref, codec, timeOf[V](b, c.step, c))
}

// streamFrom adds a source node reading ref to sub and returns its stream.
func streamFrom[V any](b *Builder, sub *subtopology, step string, ref topicRef, codec Codec[V],
	when func(*task, V, *kgo.Record) int64) *Stream[V] {
	s := &Stream[V]{b: b, sub: sub, p: &port[V]{}, srcs: []topicRef{ref}}
	sub.sources = append(sub.sources, &sourceNode{step: step, topic: ref, handle: func(t *task, r *kgo.Record) error {
		v, err := codec.Decode(r.Value)
		if err != nil {
			t.deadLetter(step, "decode", err.Error())
			return nil
		}
		ts := when(t, v, r)
		t.wm.observe(r.Topic, ts, t.wallNow())
		return s.p.emit(t, string(r.Key), v, ts)
	}})
	return s
}

// Filter keeps the records for which keep returns true.
func (s *Stream[V]) Filter(step string, keep func(key string, v V) bool) *Stream[V] {
	s.b.step("filter", step)
	s.b.describe("filter %s", step)
	out := derive[V, V](s)
	s.p.to(func(t *task, key string, v V, ts int64) error {
		if keep(key, v) {
			return out.p.emit(t, key, v, ts)
		}
		return nil
	})
	return out
}

// Map turns each value into another; the key is kept, so no repartition follows.
func Map[V, W any](s *Stream[V], step string, f func(key string, v V) W) *Stream[W] {
	s.b.step("map", step)
	s.b.describe("map %s %s->%s", step, typeName[V](), typeName[W]())
	out := derive[V, W](s)
	s.p.to(func(t *task, key string, v V, ts int64) error { return out.p.emit(t, key, f(key, v), ts) })
	return out
}

// FlatMap turns each value into zero or more values with the same key.
func FlatMap[V, W any](s *Stream[V], step string, f func(key string, v V) []W) *Stream[W] {
	s.b.step("flatmap", step)
	s.b.describe("flatmap %s %s->%s", step, typeName[V](), typeName[W]())
	out := derive[V, W](s)
	s.p.to(func(t *task, key string, v V, ts int64) error {
		for _, w := range f(key, v) {
			if err := out.p.emit(t, key, w, ts); err != nil {
				return err
			}
		}
		return nil
	})
	return out
}

// SelectKey gives each record a new key. The next grouping repartitions through the topic
// `<app>.<view>.v<N>.repartition.<step>` so that records of one key meet in one task.
func SelectKey[V any](s *Stream[V], step string, f func(key string, v V) string) *Stream[V] {
	s.b.step("selectkey", step)
	s.b.describe("selectkey %s", step)
	out := derive[V, V](s)
	out.rekeyed = step
	s.p.to(func(t *task, key string, v V, ts int64) error { return out.p.emit(t, f(key, v), v, ts) })
	return out
}

// Grouped is a stream whose records of one key are in one task, ready to aggregate.
type Grouped[V any] struct {
	s *Stream[V]
}

// GroupByKey groups s by its key; it repartitions if an earlier step changed the key.
func GroupByKey[V any](s *Stream[V]) *Grouped[V] {
	if s.rekeyed == "" {
		return &Grouped[V]{s: s}
	}
	return &Grouped[V]{s: repartition(s, s.rekeyed, JSON[V]())}
}

// GroupBy re-keys s with f and groups by the new key, repartitioning through step's topic.
func GroupBy[V any](s *Stream[V], step string, f func(key string, v V) string) *Grouped[V] {
	return GroupByKey(SelectKey(s, step, f))
}

// repartition writes s to the repartition topic of step and returns the stream read back from
// it in a new sub-topology; the record timestamp carries the event time across.
func repartition[V any](s *Stream[V], step string, codec Codec[V]) *Stream[V] {
	b := s.b
	ref := topicRef{repartition: step}
	b.describe("repartition %s codec=%s", step, codec.Name())
	s.p.to(func(t *task, key string, v V, ts int64) error {
		val, err := codec.Encode(v)
		if err != nil {
			return fmt.Errorf("views: view %q step %q: encode for repartition: %w", t.env.view.name, step, err)
		}
		t.produceKeyed(t.env.resolve(ref), key, val, ts)
		return nil
	})
	out := streamFrom(b, b.newSub(), step, ref, codec, func(_ *task, _ V, r *kgo.Record) int64 {
		return r.Timestamp.UnixMilli()
	})
	out.rekeyed = ""
	return out
}

// produceKeyed sends a record to topicName in the partition its key maps to.
func (t *task) produceKeyed(topicName, key string, value []byte, ts int64, headers ...kgo.RecordHeader) {
	k := []byte(key)
	r := &kgo.Record{
		Topic: topicName, Key: k, Value: value, Timestamp: time.UnixMilli(ts), Headers: headers,
		Partition: partition.For(k, t.out.partitions(topicName)),
	}
	if n := topic.RecordSize(r); t.mayNotFit(n) && !t.fits("to-"+sanitize(topicName), topicName, k, n) {
		return
	}
	t.out.produce(r)
}

// To sends every record of s to the Kafka topic topicName, keyed as in s and encoded with
// codec; records are partitioned by key with Kafka's default partitioner.
func (s *Stream[V]) To(topicName string, codec Codec[V]) {
	b := s.b
	if topicName == "" || codec == nil {
		b.fail("", "To needs a topic and a codec")
		return
	}
	b.view.outputs = append(b.view.outputs, topicName)
	b.describe("to %s codec=%s", topicName, codec.Name())
	s.p.to(func(t *task, key string, v V, ts int64) error {
		val, err := codec.Encode(v)
		if err != nil {
			t.deadLetter("to-"+sanitize(topicName), "encode", err.Error())
			return nil
		}
		t.produceKeyed(topicName, key, val, ts)
		return nil
	})
}
