package tarnq

import (
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tarnhq/tarn/internal/topic"
)

// Progress tells when a run of a [Plan] has taken every input record all the way through:
// when each view's consumer group has committed its inputs to the end offsets they had when
// the run began, and every repartition topic to its current end. Offsets
// are committed only after a batch's effects are durable, so then the output is complete.
type Progress struct {
	plan        *Plan
	app         string
	exactlyOnce bool
	adm         *kadm.Client
	starts      kadm.ListedOffsets // of the inputs
	ends        kadm.ListedOffsets
	records     int64
	streamed    int64
}

// NewProgress captures the end offsets of the plan's inputs; a run of app started after it
// is done when it has processed them.
func (p *Plan) NewProgress(ctx context.Context, adm *kadm.Client, app string, exactlyOnce bool) (*Progress, error) {
	starts, ends, err := offsets(ctx, adm, p.Inputs)
	if err != nil {
		return nil, err
	}
	g := &Progress{plan: p, app: app, exactlyOnce: exactlyOnce, adm: adm, starts: starts, ends: ends}
	ends.Each(func(o kadm.ListedOffset) {
		n := o.Offset - starts[o.Topic][o.Partition].Offset
		g.records += n
		if p.grouped(o.Topic) {
			g.streamed += n
		}
	})
	return g, nil
}

// grouped reports whether some view of the plan reads input through its consumer group, not
// as a side input (a co-partitioned table).
func (p *Plan) grouped(input string) bool {
	for _, srcs := range p.reads {
		for _, s := range srcs {
			if s.repartition == "" && s.name == input {
				return true
			}
		}
	}
	return false
}

// Records is the number of input records the run processes.
func (g *Progress) Records() int64 { return g.records }

// Streamed is the number of input records the views' consumer groups process as streams: the
// records of side inputs (tables joined) are applied to stores, not counted as processed by
// the runtime, so a run has processed at least this many when it is done.
func (g *Progress) Streamed() int64 { return g.streamed }

// Done reports whether the run has processed and committed every input record and every
// record its views sent to their repartition topics, and (exactly once) whether every
// transaction on the output is settled, so that a read_committed reader sees all of it.
//
// The committed offsets are read before the internal topics' ends: a group that has
// committed all its inputs has produced everything it will write, so ends read later are
// final for it, and by induction along the plan's views the check holds through any chain.
func (g *Progress) Done(ctx context.Context) (bool, error) {
	committed := map[string]kadm.OffsetResponses{}
	for _, v := range g.plan.Views {
		group := topic.Group(g.app, string(v.Name()), v.Version())
		offs, err := g.adm.FetchOffsets(ctx, group)
		if err == nil {
			err = offs.Error()
		}
		if kerr.IsRetriable(err) {
			return false, nil // the group's coordinator is still loading
		}
		if err != nil {
			return false, fmt.Errorf("tarnq: committed offsets of %s: %w", group, err)
		}
		committed[group] = offs
	}
	// Repartition topics appear when the runtime has set up; until then they are unknown.
	// Exactly once, the output is listed with them: its transactions must be settled too.
	internal := g.plan.Internal(g.app)
	written := internal
	if g.exactlyOnce {
		written = append(slices.Clone(internal), g.plan.Output)
	}
	starts, hwm, err := offsets(ctx, g.adm, written)
	if kerr.IsRetriable(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	lso := kadm.ListedOffsets{}
	if g.exactlyOnce && len(written) > 0 {
		if lso, err = g.adm.ListCommittedOffsets(ctx, written...); err == nil {
			err = lso.Error()
		}
		if kerr.IsRetriable(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("tarnq: last stable offsets of %v: %w", written, err)
		}
		// The coordinator writes a committed transaction's markers to its partitions one by
		// one, so the group's offsets (committed in that transaction) can be visible before
		// the output's last stable offset has moved past the records it committed.
		if !settled(g.plan.Output, hwm, lso) {
			return false, nil
		}
	}
	for _, v := range g.plan.Views {
		offs := committed[topic.Group(g.app, string(v.Name()), v.Version())]
		for _, s := range g.plan.reads[v] {
			name := s.resolve(g.app, v)
			var ok bool
			if slices.Contains(internal, name) {
				ok = g.reachedInternal(offs, name, starts, hwm, lso)
			} else {
				ok = reached(offs, name, g.starts, g.ends)
			}
			if !ok {
				return false, nil
			}
		}
	}
	return true, nil
}

// reached reports whether offs commit every partition of name that holds records (its end
// in ends is beyond its start in starts) to that end.
func reached(offs kadm.OffsetResponses, name string, starts, ends kadm.ListedOffsets) bool {
	done := true
	ends.Each(func(o kadm.ListedOffset) {
		if o.Topic != name || o.Offset <= starts[o.Topic][o.Partition].Offset {
			return
		}
		c, ok := offs.Lookup(name, o.Partition)
		done = done && ok && c.Err == nil && c.At >= o.Offset
	})
	return done
}

// reachedInternal is [reached] for a repartition topic. With exactly-once
// the last record of each of its partitions is a transaction marker, which consumers skip and
// do not commit past, so one offset short of the end is the end once nothing is pending (the
// last stable offset is the end).
func (g *Progress) reachedInternal(offs kadm.OffsetResponses, name string, starts, hwm, lso kadm.ListedOffsets) bool {
	if !g.exactlyOnce {
		return reached(offs, name, starts, hwm)
	}
	ends := kadm.ListedOffsets{}
	hwm.Each(func(o kadm.ListedOffset) {
		if o.Topic != name {
			return
		}
		if ends[o.Topic] == nil {
			ends[o.Topic] = map[int32]kadm.ListedOffset{}
		}
		o.Offset--
		ends[o.Topic][o.Partition] = o
	})
	return settled(name, hwm, lso) && reached(offs, name, starts, ends)
}

// settled reports whether no transaction is open on any partition of name: its last stable
// offset is its end.
func settled(name string, hwm, lso kadm.ListedOffsets) bool {
	ok := true
	hwm.Each(func(o kadm.ListedOffset) {
		ok = ok && (o.Topic != name || lso[o.Topic][o.Partition].Offset == o.Offset)
	})
	return ok
}

// offsets returns the start and end offsets of topics.
func offsets(ctx context.Context, adm *kadm.Client, topics []string) (starts, ends kadm.ListedOffsets, err error) {
	if len(topics) == 0 {
		return kadm.ListedOffsets{}, kadm.ListedOffsets{}, nil
	}
	if starts, err = adm.ListStartOffsets(ctx, topics...); err == nil {
		err = starts.Error()
	}
	if err == nil {
		if ends, err = adm.ListEndOffsets(ctx, topics...); err == nil {
			err = ends.Error()
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("tarnq: offsets of %v: %w", topics, err)
	}
	return starts, ends, nil
}
