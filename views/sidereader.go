package views

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// sideReader reads one engine's side inputs (see side.go) with one client that consumes
// partitions directly, outside the group: co-table partitions of the tasks this instance
// runs, and every partition of followed topics. Records are applied only while a batch is
// being processed (its write set is open), by the engine's loop.
type sideReader struct {
	e      *engine
	counts map[string]int32 // partition count of every side topic
	cl     *kgo.Client
	adm    *kadm.Client

	mu     sync.Mutex
	parts  map[sideTP]*sidePart
	byTask map[taskID][]*sidePart

	// dirty are the co-table partitions that applied records in the batch; tasks add to it
	// while they run in parallel, under dirtyMu (mu may be held by the adder already).
	dirtyMu sync.Mutex
	dirty   []*coPart
}

type sideTP struct {
	topic     string
	partition int32
}

// sidePart is one partition the side reader consumes.
type sidePart struct {
	sideTP
	// next is the offset after the last record consumed (data or control).
	next   int64
	co     *coPart
	follow *followSpec
	fc     *FollowContext
}

// sideSyncTimeout bounds how long a batch waits for its side inputs to reach their ends.
const sideSyncTimeout = 2 * time.Minute

func (e *engine) sideRefs() []topicRef {
	ext := &e.v.ext
	var refs []topicRef
	for _, c := range ext.coTables {
		refs = append(refs, c.ref)
	}
	for _, f := range ext.follows {
		refs = append(refs, f.ref)
	}
	for _, r := range ext.like {
		refs = append(refs, r)
	}
	return refs
}

// readSideTopics learns the partition counts of the side topics, which must exist.
func (e *engine) readSideTopics(ctx context.Context, adm *kadm.Client) error {
	e.side = &sideReader{e: e, counts: map[string]int32{}, parts: map[sideTP]*sidePart{}, byTask: map[taskID][]*sidePart{}}
	var names []string
	for _, r := range e.sideRefs() {
		name := r.resolve(e.rt.cfg.App, e.v)
		// Known to the env so that RequireCoPartitioned can name side topics too.
		e.env.topics[r] = name
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	names = slices.Compact(names)
	td, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("views: view %q: list table topics: %w", e.v.name, err)
	}
	var missing []string
	for _, n := range names {
		d, ok := td[n]
		if !ok || d.Err != nil || len(d.Partitions) == 0 {
			missing = append(missing, n)
			continue
		}
		e.side.counts[n] = int32(len(d.Partitions))
	}
	if len(missing) > 0 {
		return fmt.Errorf("views: view %q: table topics %s do not exist; create them (or start the cdc source) first",
			e.v.name, strings.Join(missing, ", "))
	}
	return nil
}

// repartitionCount is the partition count of the repartition topic of ref: that of the table
// it was co-partitioned with ([CoPartition]), else n.
func (e *engine) repartitionCount(ref topicRef, n int32) int32 {
	if like, ok := e.v.ext.like[ref.repartition]; ok {
		return e.side.counts[like.resolve(e.rt.cfg.App, e.v)]
	}
	return n
}

// setupSides checks that every co-table has its stream's partition count and starts the side
// reader with the followed topics' partitions.
func (e *engine) setupSides(ctx context.Context, adm *kadm.Client) error {
	ext := &e.v.ext
	for _, c := range ext.coTables {
		if err := e.checkCoTable(c); err != nil {
			return fmt.Errorf("views: view %q step %q: %w", e.v.name, c.step, err)
		}
	}
	if len(ext.coTables) == 0 && len(ext.follows) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(slices.Clone(e.base),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records count as reached: a topic written transactionally ends with a
		// commit marker, which is never returned otherwise.
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.FetchMaxBytes(16<<20),
	)...)
	if err != nil {
		return fmt.Errorf("views: view %q: side input client: %w", e.v.name, err)
	}
	e.side.cl, e.side.adm = cl, kadm.NewClient(cl)
	for _, f := range ext.follows {
		if err := e.side.follow(ctx, f); err != nil {
			return fmt.Errorf("views: view %q step %q: %w", e.v.name, f.step, err)
		}
	}
	return nil
}

func (e *engine) checkCoTable(c *coTableSpec) error {
	name := c.ref.resolve(e.rt.cfg.App, e.v)
	n, want := e.side.counts[name], e.subParts[c.sub.id]
	if n == want {
		return nil
	}
	var srcs []string
	for _, s := range c.sub.sources {
		t := e.env.resolve(s.topic)
		srcs = append(srcs, fmt.Sprintf("%s has %d", t, e.parts[t]))
	}
	return fmt.Errorf("%w: table %s has %d partitions, stream %s; give them the same partition count or repartition the stream with views.CoPartition",
		ErrCoPartition, name, n, strings.Join(srcs, ", "))
}

// follow starts consuming every partition of a followed topic.
func (s *sideReader) follow(ctx context.Context, f *followSpec) error {
	name := f.ref.resolve(s.e.rt.cfg.App, s.e.v)
	first, err := s.offsets(ctx, name, f.fromStart)
	if err != nil {
		return err
	}
	fc := &FollowContext{e: s.e.env, out: s.e, step: f.step, partitions: s.counts[name]}
	offs := map[int32]kgo.Offset{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, off := range first {
		s.parts[sideTP{name, p}] = &sidePart{sideTP: sideTP{name, p}, next: off, follow: f, fc: fc}
		offs[p] = kgo.NewOffset().At(off)
	}
	s.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{name: offs})
	return nil
}

// offsets lists the start (or the end, read committed) offset of every partition of topic.
func (s *sideReader) offsets(ctx context.Context, topic string, start bool) (map[int32]int64, error) {
	var l kadm.ListedOffsets
	var err error
	if start {
		l, err = s.adm.ListStartOffsets(ctx, topic)
	} else {
		l, err = s.adm.ListCommittedOffsets(ctx, topic)
	}
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	l.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

// openSides starts the co-table partitions of a task just restored: from the offset after the
// one its store applied (or the topic's start), with the topic's current end as the barrier
// that the task's first joined record waits for.
func (e *engine) openSides(ctx context.Context, t *runTask) error {
	s := e.side
	if s == nil || s.cl == nil {
		return nil
	}
	for _, c := range e.v.ext.coTables {
		if c.sub != t.sub {
			continue
		}
		if err := s.openCoTable(ctx, c, t); err != nil {
			return fmt.Errorf("views: view %q step %q partition %d: %w", e.v.name, c.step, t.partition, err)
		}
	}
	return nil
}

func (s *sideReader) openCoTable(ctx context.Context, c *coTableSpec, t *runTask) error {
	name := c.ref.resolve(s.e.rt.cfg.App, s.e.v)
	a, ok := t.kv[c.store.index].(kvAdapter)
	if !ok {
		return errors.New("co-table store is not a runtime store")
	}
	starts, err := s.offsets(ctx, name, true)
	if err != nil {
		return err
	}
	ends, err := s.offsets(ctx, name, false)
	if err != nil {
		return err
	}
	next := starts[t.partition]
	raw, applied, err := a.kv.Get(s.e.rt.cfg.State, posKey)
	if err != nil {
		return err
	}
	if applied && len(raw) == 8 {
		next = max(next, int64(binary.BigEndian.Uint64(raw))+1)
	}
	co := &coPart{spec: c, t: t.task, barrier: ends[t.partition], dirty: s.markDirty,
		catchUp: kvAdapter{w: newWrites(s.e), kv: a.kv}}
	t.state["\x00cotable:"+c.step] = co
	tp := sideTP{name, t.partition}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.parts[tp]; old != nil {
		s.cl.RemoveConsumePartitions(map[string][]int32{name: {t.partition}})
	}
	sp := &sidePart{sideTP: tp, next: next, co: co}
	s.parts[tp] = sp
	id := taskID{t.sub.id, t.partition}
	s.byTask[id] = append(s.byTask[id], sp)
	s.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{name: {t.partition: kgo.NewOffset().At(next)}})
	return nil
}

func (s *sideReader) markDirty(co *coPart) {
	s.dirtyMu.Lock()
	s.dirty = append(s.dirty, co)
	s.dirtyMu.Unlock()
}

// syncSides brings the side inputs that the fetched batch needs to the ends their topics have
// now: the followed topics and the co-tables of the tasks with records in fs.
func (e *engine) syncSides(ctx context.Context, fs kgo.Fetches) error {
	s := e.side
	if s == nil || s.cl == nil {
		return nil
	}
	var ids []taskID
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if sub := e.subOf[p.Topic]; sub != nil && len(p.Records) > 0 {
			ids = append(ids, taskID{sub.id, p.Partition})
		}
	})
	for _, id := range ids {
		// Opening a task registers its co-table partitions.
		if _, err := e.task(ctx, id); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	targets := s.targets(ids)
	if len(targets) == 0 {
		return nil
	}
	if err := s.listEnds(ctx, targets); err != nil {
		return fmt.Errorf("views: view %q: %w", e.v.name, err)
	}
	return s.syncTo(ctx, targets)
}

// targets are the partitions a batch of tasks ids needs, each with the offset it must reach
// (filled by listEnds; a co-table's barrier at least).
func (s *sideReader) targets(ids []taskID) map[*sidePart]int64 {
	targets := map[*sidePart]int64{}
	for _, sp := range s.parts {
		if sp.follow != nil {
			targets[sp] = 0
		}
	}
	for _, id := range ids {
		for _, sp := range s.byTask[id] {
			targets[sp] = sp.co.barrier
		}
	}
	return targets
}

func (s *sideReader) listEnds(ctx context.Context, targets map[*sidePart]int64) error {
	var topics []string
	for sp := range targets {
		topics = append(topics, sp.topic)
	}
	slices.Sort(topics)
	l, err := s.adm.ListCommittedOffsets(ctx, slices.Compact(topics)...)
	if err == nil {
		err = l.Error()
	}
	if err != nil {
		return fmt.Errorf("list end offsets of table topics: %w", err)
	}
	for sp, at := range targets {
		if o, ok := l.Lookup(sp.topic, sp.partition); ok {
			targets[sp] = max(at, o.Offset)
		}
	}
	return nil
}

// syncTo polls until every target partition consumed up to its offset, routing what arrives.
func (s *sideReader) syncTo(ctx context.Context, targets map[*sidePart]int64) error {
	ctx, cancel := context.WithTimeout(ctx, sideSyncTimeout)
	defer cancel()
	for {
		var behind []string
		for sp, end := range targets {
			if sp.next < end {
				behind = append(behind, fmt.Sprintf("%s/%d at %d of %d", sp.topic, sp.partition, sp.next, end))
			}
		}
		if len(behind) == 0 {
			return nil
		}
		fs := s.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("views: view %q: table topics did not reach their ends within %s: %s",
				s.e.v.name, sideSyncTimeout, strings.Join(behind, ", "))
		}
		if err := s.fetchErrors(fs); err != nil {
			return err
		}
		// The fetch may hold catch-up records of partitions this batch does not need: they
		// are committed too, so no catch-up write set outlives its fetch.
		err := s.route(fs)
		for _, sp := range s.parts {
			if sp.co == nil {
				continue
			}
			if err != nil {
				sp.co.catchUp.w.discard()
			} else if err = sp.co.flushCatchUp(ctx, s.cl); err != nil {
				err = fmt.Errorf("views: view %q: %w", s.e.v.name, err)
			}
		}
		if err != nil {
			return err
		}
	}
}

func (s *sideReader) fetchErrors(fs kgo.Fetches) error {
	var fatal error
	fs.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		s.e.log.Warn("views: side input fetch", "topic", t, "partition", p, "err", err)
		var de *kgo.ErrDataLoss
		if !errors.As(err, &de) && !kgoRetriable(err) {
			fatal = fmt.Errorf("views: view %q: fetch table topic %s/%d: %w", s.e.v.name, t, p, err)
		}
	})
	return fatal
}

// route hands fetched records to their co-table partitions and followers, skipping what was
// consumed already (a partition re-added after a restore may be fetched twice).
func (s *sideReader) route(fs kgo.Fetches) error {
	var err error
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		sp := s.parts[sideTP{p.Topic, p.Partition}]
		for _, r := range p.Records {
			if err != nil || sp == nil {
				return
			}
			if r.Offset < sp.next {
				continue
			}
			sp.next = r.Offset + 1
			if r.Attrs.IsControl() {
				continue
			}
			if sp.co != nil {
				err = sp.co.receive(r)
			} else {
				err = sp.follow.apply(sp.fc, r)
			}
		}
	})
	return err
}

// sidesCommitted is called after a batch committed, sidesDiscarded after it was discarded:
// the co-table records it applied are then pending again, since their writes were dropped.
func (e *engine) sidesCommitted() { e.side.settled(false) }
func (e *engine) sidesDiscarded() { e.side.settled(true) }

func (s *sideReader) settled(discarded bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dirtyMu.Lock()
	defer s.dirtyMu.Unlock()
	for _, co := range s.dirty {
		if discarded {
			co.discarded()
		} else {
			co.committed()
		}
	}
	s.dirty = s.dirty[:0]
}

// forgetSide stops reading the co-table partitions of a task that was closed.
func (e *engine) forgetSide(id taskID) {
	s := e.side
	if s == nil || s.cl == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sp := range s.byTask[id] {
		delete(s.parts, sp.sideTP)
		s.cl.RemoveConsumePartitions(map[string][]int32{sp.topic: {sp.partition}})
	}
	delete(s.byTask, id)
}

// forgetSides forgets the co-table partitions of every task.
func (e *engine) forgetSides() {
	if e.side == nil {
		return
	}
	e.side.mu.Lock()
	ids := make([]taskID, 0, len(e.side.byTask))
	for id := range e.side.byTask {
		ids = append(ids, id)
	}
	e.side.mu.Unlock()
	for _, id := range ids {
		e.forgetSide(id)
	}
}

// closeSides closes the side reader's client when the engine stops.
func (e *engine) closeSides() {
	if e.side != nil && e.side.cl != nil {
		e.side.cl.Close()
	}
}
