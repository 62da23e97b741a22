package views

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// CDCTopics are the CDC table topics the serving version of view reads through its consumer
// group (not its co-tables or followed topics): those whose records [Runtime.WaitApplied]
// can wait for.
func (r *Runtime) CDCTopics(view Name) ([]string, error) {
	e, err := r.queryable(view)
	if err != nil {
		return nil, err
	}
	var out []string
	for name, src := range e.bySource {
		if src.topic.cdcTable != "" {
			out = append(out, name)
		}
	}
	return out, nil
}

// waitPoll is how often WaitApplied looks at the group's committed offsets.
const waitPoll = 10 * time.Millisecond

// WaitApplied returns once the serving version of view has applied every record below ends
// (offsets per partition of some of its source topics, e.g. the CDC table topics' ends at the
// moment the CDC source had written a Postgres transaction): every sub-topology, in order,
// has committed its group offsets past the records they led to (the inputs first, then each
// repartition topic up to its end once the step before it got there), and this instance has
// applied its own served partitions. It is what a min_lsn read waits for, and a
// min_offsets=topic:partition:offset one (ends then name a producer's records). Committed
// offsets are never ahead of applied state (exactly once they commit with it, at least once
// after it), so the answer errs on the side of waiting.
func (r *Runtime) WaitApplied(ctx context.Context, view Name, ends map[string]map[int32]int64) error {
	e, err := r.queryable(view)
	if err != nil {
		return err
	}
	adm, err := e.waitClient()
	if err != nil {
		return err
	}
	for _, sub := range e.v.subs {
		targets := map[string]map[int32]int64{}
		for _, src := range sub.sources {
			name := e.env.resolve(src.topic)
			switch {
			case ends[name] != nil:
				targets[name] = ends[name]
			case src.topic.repartition != "":
				// The steps before this one have committed past what the inputs led to, so
				// every record they produced for it is in the topic now.
				listed, err := adm.ListEndOffsets(ctx, name)
				if err != nil {
					return fmt.Errorf("views: view %q: list %s: %w", view, name, err)
				}
				t := map[int32]int64{}
				listed.Each(func(o kadm.ListedOffset) { t[o.Partition] = o.Offset })
				targets[name] = t
			}
		}
		if len(targets) == 0 {
			continue
		}
		if err := e.waitCommitted(ctx, adm, targets); err != nil {
			return err
		}
		if sub == e.v.served.sub {
			return e.waitLocal(ctx, targets)
		}
	}
	return nil
}

// waitClient is the admin client of the engine's waits, made on the first one and shared by
// all (a client per read would cost a connection and a metadata round trip each).
func (e *engine) waitClient() (*kadm.Client, error) {
	e.waits.Lock()
	defer e.waits.Unlock()
	if e.waits.adm == nil {
		cl, err := kgo.NewClient(e.base...)
		if err != nil {
			return nil, err
		}
		e.waits.cl, e.waits.adm = cl, kadm.NewClient(cl)
	}
	return e.waits.adm, nil
}

// closeWaitClient closes the waits' client when the engine stops.
func (e *engine) closeWaitClient() {
	e.waits.Lock()
	defer e.waits.Unlock()
	if e.waits.cl != nil {
		e.waits.cl.Close()
		e.waits.cl, e.waits.adm = nil, nil
	}
}

// waitCommitted polls the group's committed offsets until they reach targets.
func (e *engine) waitCommitted(ctx context.Context, adm *kadm.Client, targets map[string]map[int32]int64) error {
	var offs kadm.OffsetResponses
	at := func(t string, p int32) int64 {
		o, ok := offs.Lookup(t, p)
		if !ok {
			return 0
		}
		return o.At
	}
	for {
		var err error
		offs, err = adm.FetchOffsets(ctx, e.group)
		if err == nil {
			if reached(targets, at) {
				return nil
			}
		} else if ctx.Err() == nil && !transient(err) {
			return fmt.Errorf("views: view %q: fetch the group's offsets: %w", e.v.name, err)
		}
		select {
		case <-ctx.Done():
			e.log.Debug("views: a wait for applied input ended first", "targets", targets, "committed", offs)
			return ctx.Err()
		case <-time.After(waitPoll):
		}
	}
}

// waitLocal waits until the batches this instance applied reach targets on the partitions
// it owns (exactly once, Pebble is written just after the transaction commits).
func (e *engine) waitLocal(ctx context.Context, targets map[string]map[int32]int64) error {
	for {
		// The targets on owned partitions and what was applied to them are read under
		// e.mu: commit writes e.mu.consumed's inner maps.
		local := map[string]map[int32]int64{}
		applied := map[string]map[int32]int64{}
		e.mu.Lock()
		owned := map[int32]bool{}
		for id := range e.mu.tasks {
			if id.sub == e.v.served.sub.id {
				owned[id.part] = true
			}
		}
		for t, ps := range targets {
			for p, off := range ps {
				if !owned[p] {
					continue
				}
				if local[t] == nil {
					local[t], applied[t] = map[int32]int64{}, map[int32]int64{}
				}
				local[t][p], applied[t][p] = off, e.mu.consumed[t][p]
			}
		}
		e.mu.Unlock()
		if reached(local, func(t string, p int32) int64 { return applied[t][p] }) {
			return nil
		}
		select {
		case <-ctx.Done():
			e.log.Debug("views: a wait for applied input ended first, here", "targets", local, "applied", applied)
			return ctx.Err()
		case <-time.After(waitPoll):
		}
	}
}

// reached reports whether at(t, p) >= targets[t][p] for every partition with records
// (target > 0).
func reached(targets map[string]map[int32]int64, at func(t string, p int32) int64) bool {
	for t, ps := range targets {
		for p, off := range ps {
			if off > 0 && at(t, p) < off {
				return false
			}
		}
	}
	return true
}

// Inputs are the topics the serving version of view reads through its consumer group, in
// name order, at any step (also before a repartition), but not its own repartition topics
// nor its co-tables or followed topics: those whose records [Runtime.WaitApplied] can wait
// for when a producer names them.
func (r *Runtime) Inputs(view Name) ([]string, error) {
	e, err := r.queryable(view)
	if err != nil {
		return nil, err
	}
	var out []string
	for name, src := range e.bySource {
		if src.topic.repartition == "" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}
