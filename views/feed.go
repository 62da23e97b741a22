package views

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"github.com/tarnhq/tarn/state"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrSlowWatcher ends a [Subscription] whose reader fell behind by more than its buffer: the
// producer is never slowed; the watcher resumes from the last position it saw.
var ErrSlowWatcher = errors.New("views: watcher fell behind; resume from its last position")

// Subscription delivers the applied changes of a view's owned partitions. C is closed when
// the subscription ends; Err then says why (nil after Close).
//
// Positions: a change read back from the changelog (the part after the position given to
// Subscribe) carries its exact changelog offset; a live change carries the offset its batch
// reached in that partition's changelog, so the changes of one batch share it. Resume from
// the position of the last change of a batch (Change.Last) to lose and repeat nothing.
type Subscription struct {
	C    <-chan Change
	c    chan Change
	live chan Change
	once sync.Once
	done chan struct{}
	err  error
	feed *feed
}

// Err reports why C was closed.
func (s *Subscription) Err() error {
	<-s.done
	return s.err
}

// Close ends the subscription.
func (s *Subscription) Close() { s.end(nil) }

func (s *Subscription) end(err error) {
	s.once.Do(func() {
		s.err = err
		s.feed.remove(s)
		close(s.done)
	})
}

// feed fans a view's applied changes out to its subscriptions.
type feed struct {
	mu   sync.Mutex
	subs map[*Subscription]struct{}
}

func newFeed() *feed { return &feed{subs: map[*Subscription]struct{}{}} }

func (f *feed) add(s *Subscription) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs[s] = struct{}{}
}

func (f *feed) remove(s *Subscription) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.subs, s)
}

// closeAll ends every subscription with err.
func (f *feed) closeAll(err error) {
	f.mu.Lock()
	subs := make([]*Subscription, 0, len(f.subs))
	for s := range f.subs {
		subs = append(subs, s)
	}
	f.mu.Unlock()
	for _, s := range subs {
		s.end(err)
	}
}

// publish hands changes to every subscription without blocking; a full buffer ends that
// subscription with ErrSlowWatcher.
func (f *feed) publish(changes []Change) {
	f.mu.Lock()
	subs := make([]*Subscription, 0, len(f.subs))
	for s := range f.subs {
		subs = append(subs, s)
	}
	f.mu.Unlock()
	for _, s := range subs {
		for _, c := range changes {
			select {
			case s.live <- c:
				continue
			default:
			}
			s.end(ErrSlowWatcher)
			break
		}
	}
}

// publish gives the batch's served changes their positions and hands them to the feed. It
// runs once the batch is durable in Kafka and before its write sets are applied (so that no
// position a reader sees is past a change not yet handed over). Each change gets the offset
// of its own changelog record: a batch keeps the last change of each key (as the changelog
// does), in changelog order, so offsets rise strictly and a watcher resuming after any of
// them replays from the changelog exactly what followed.
func (e *engine) publish(touched []*runTask) {
	var all []Change
	for _, t := range touched {
		if len(t.changes) == 0 {
			continue
		}
		all = append(all, e.positioned(t)...)
		t.changes = t.changes[:0]
	}
	if len(all) > 0 {
		e.feed.publish(all)
	}
}

// positioned returns t's changes of the batch, one per changelog record, by offset.
func (e *engine) positioned(t *runTask) []Change {
	txn := t.w.txn
	if txn == nil {
		return nil // nothing was written: no change either
	}
	win, windowed := t.served.(*state.Window)
	seen := make(map[string]bool, len(t.changes))
	out := make([]Change, 0, len(t.changes))
	for i := len(t.changes) - 1; i >= 0; i-- {
		c := t.changes[i]
		clKey := []byte(c.Key)
		if windowed && c.Window != nil {
			clKey = win.ChangelogKey(clKey, c.Window.Start)
		}
		if seen[string(clKey)] {
			continue // a later change of the key in this batch replaced it
		}
		seen[string(clKey)] = true
		off, ok := txn.ChangelogOffset(t.served, clKey)
		if !ok {
			e.log.Error("views: a change of the served store has no changelog record", "key", c.Key)
			continue
		}
		c.Offset = off
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Change) int { return cmp.Compare(a.Offset, b.Offset) })
	if len(out) > 0 {
		out[len(out)-1].Last = true
	}
	return out
}

// subscribe starts a subscription of buffer changes; after, when not nil, holds per partition
// the last position the watcher saw: changes after it are read back from the changelog first.
func (e *engine) subscribe(ctx context.Context, after map[int32]int64, buffer int) (*Subscription, error) {
	s := &Subscription{c: make(chan Change, buffer), live: make(chan Change, buffer), done: make(chan struct{}), feed: e.feed}
	s.C = s.c
	// Under publishMu a batch is either wholly published to s (added first) or applied
	// before the positions are read (then replayed from the changelog).
	e.publishMu.Lock()
	e.feed.add(s)
	positions := e.positions()
	e.publishMu.Unlock()
	ends := map[int32]int64{}
	for p, off := range positions {
		if a, ok := after[p]; ok && a < off {
			ends[p] = off
		}
	}
	go e.deliver(ctx, s, after, ends)
	return s, nil
}

// deliver replays the changelog from after to ends, then forwards live changes past ends.
func (e *engine) deliver(ctx context.Context, s *Subscription, after, ends map[int32]int64) {
	defer close(s.c)
	if len(ends) > 0 {
		if err := e.replay(ctx, s, after, ends); err != nil {
			s.end(err)
			return
		}
	}
	for {
		select {
		case <-ctx.Done():
			s.end(ctx.Err())
			return
		case <-s.done:
			return
		case c := <-s.live:
			// Replayed already, or before where the subscriber resumes. (A missing entry is
			// not 0: the first record of a changelog partition is at offset 0.)
			if end, ok := ends[c.Partition]; ok && c.Offset <= end {
				continue
			}
			if a, ok := after[c.Partition]; ok && c.Offset <= a {
				continue
			}
			select {
			case s.c <- c:
			case <-s.done:
				return
			case <-ctx.Done():
				s.end(ctx.Err())
				return
			}
		}
	}
}

// replay reads the served store's changelog partitions from after+1 through ends.
func (e *engine) replay(ctx context.Context, s *Subscription, after, ends map[int32]int64) error {
	tp := e.storeID(e.v.served.name, 0).Topic()
	offs := map[int32]kgo.Offset{}
	for p := range ends {
		offs[p] = kgo.NewOffset().At(after[p] + 1)
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, e.base...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{tp: offs}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for len(ends) > 0 {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return err
		}
		for _, r := range fs.Records() {
			end, ok := ends[r.Partition]
			if !ok {
				continue
			}
			if r.Offset > end {
				// The record at end was compacted away: the partition is caught up.
				delete(ends, r.Partition)
				continue
			}
			c := e.changeOf(r)
			c.Last = r.Offset == end
			select {
			case s.c <- c:
			case <-s.done:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
			if r.Offset >= end {
				delete(ends, r.Partition)
			}
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			// Compaction and transaction markers leave gaps: a fetch that comes back empty
			// although the stable end is past end has read everything up to end. A fetch
			// that returned only part of what is left is not the end (it was, before: a
			// watcher's catch-up could stop early).
			if end, ok := ends[p.Partition]; ok && p.LastStableOffset > end && len(p.Records) == 0 {
				delete(ends, p.Partition)
			}
		})
	}
	return nil
}

// changeOf turns a changelog record of the served store into a Change. Windowed changelog
// keys are the key followed by the big-endian window start in milliseconds (state's layout).
func (e *engine) changeOf(r *kgo.Record) Change {
	c := Change{Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: r.Value}
	if e.v.served.windowed && len(r.Key) >= 8 {
		n := len(r.Key) - 8
		start := int64(binary.BigEndian.Uint64(r.Key[n:]))
		w := e.v.window(start, r.Value)
		c.Key, c.Window = string(r.Key[:n]), &w
	}
	return c
}
