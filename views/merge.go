package views

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Either is a record of a [Merge]d stream: from the left input (IsRight false) or the right.
type Either[A, B any] struct {
	Left    A
	Right   B
	IsRight bool
}

// Feed is one input of [Merge]: a topic ([FromTopic]) or a stream of this view, written to a
// repartition topic first ([FromStream]).
type Feed[V any] struct {
	literal string
	codec   Codec[V]
	opts    []SourceOption
	stream  *Stream[V]
}

// FromTopic feeds a Merge from a topic, like [Source].
func FromTopic[V any](topicName string, codec Codec[V], opts ...SourceOption) Feed[V] {
	return Feed[V]{literal: topicName, codec: codec, opts: opts}
}

// FromStream feeds a Merge from s, repartitioned by its keys through the merge's repartition
// topic `<app>.<view>.v<N>.repartition.<merge step>-<side>`; the record timestamp carries the
// event time. The topic gets the partition count of the other input when that is a topic.
func FromStream[V any](s *Stream[V], codec Codec[V]) Feed[V] {
	return Feed[V]{stream: s, codec: codec}
}

// Merge reads two inputs keyed alike in one sub-topology, so that the records of one key
// from both meet in one task (and its stores): the basis of stream–stream joins. Topic inputs
// must be co-partitioned (same partition count; checked at start, [ErrCoPartition]); the
// view's consumer group then uses Kafka's range assignment, which gives partition p of every
// topic of equal partition count to the same instance. The task's watermark is the smallest
// over both inputs' partitions that are not idle.
func Merge[A, B any](b *Builder, step string, left Feed[A], right Feed[B]) *Stream[Either[A, B]] {
	b.step("merge", step)
	b.describe("merge %s", step)
	sub := b.newSub()
	out := &Stream[Either[A, B]]{b: b, sub: sub, p: &port[Either[A, B]]{}}
	var like *topicRef
	if left.literal != "" {
		like = &topicRef{literal: left.literal}
	} else if right.literal != "" {
		like = &topicRef{literal: right.literal}
	}
	l := feedInto(b, sub, step+"-left", left, like)
	r := feedInto(b, sub, step+"-right", right, like)
	if l == nil || r == nil {
		return out
	}
	out.srcs = append(append(out.srcs, l.srcs...), r.srcs...)
	if left.literal != "" && right.literal != "" {
		b.RequireCoPartitioned(l, r)
	}
	l.p.to(func(t *task, key string, v A, ts int64) error {
		return out.p.emit(t, key, Either[A, B]{Left: v}, ts)
	})
	r.p.to(func(t *task, key string, v B, ts int64) error {
		return out.p.emit(t, key, Either[A, B]{Right: v, IsRight: true}, ts)
	})
	return out
}

// feedInto adds f's source node, named step, to sub and returns its stream.
func feedInto[V any](b *Builder, sub *subtopology, step string, f Feed[V], like *topicRef) *Stream[V] {
	b.step("merge-input", step)
	if f.codec == nil {
		b.fail(step, "codec is nil; use views.JSON[T]()")
		return nil
	}
	switch {
	case f.literal != "":
		c := sourceConfigOf(f.literal, f.opts)
		ref := topicRef{literal: f.literal}
		b.describe("source %s %s codec=%s time=%s", step, ref, f.codec.Name(), c.clockName())
		return streamFrom(b, sub, step, ref, f.codec, timeOf[V](b, step, c))
	case f.stream != nil:
		ref := topicRef{repartition: step}
		if like != nil {
			ext := &b.view.ext
			if ext.like == nil {
				ext.like = map[string]topicRef{}
			}
			ext.like[step] = *like
		}
		b.describe("repartition %s codec=%s", step, f.codec.Name())
		f.stream.p.to(func(t *task, key string, v V, ts int64) error {
			val, err := f.codec.Encode(v)
			if err != nil {
				return fmt.Errorf("views: view %q step %q: encode for repartition: %w", t.env.view.name, step, err)
			}
			t.produceKeyed(t.env.resolve(ref), key, val, ts)
			return nil
		})
		return streamFrom(b, sub, step, ref, f.codec, func(_ *task, _ V, r *kgo.Record) int64 {
			return r.Timestamp.UnixMilli()
		})
	default:
		b.fail(step, "merge input has neither a topic nor a stream")
		return nil
	}
}

// balancer is the group balancer of the view: range assignment when a sub-topology reads
// several topics (it co-locates their equal partitions), cooperative-sticky otherwise.
func (e *engine) balancer() kgo.GroupBalancer {
	for _, s := range e.v.subs {
		if len(s.sources) > 1 {
			return kgo.RangeBalancer()
		}
	}
	return kgo.CooperativeStickyBalancer()
}
