package views

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// versionLog follows the versions topic (topic.Versions): it holds the latest record of every
// view and writes transitions. Every instance follows the same single partition in order, so
// all of them see the same sequence of switches.
type versionLog struct {
	topic string
	cl    *kgo.Client
	log   *slog.Logger

	// writeMu serialises this instance's read-modify-write transitions. Instances do not
	// coordinate writes: transitions are made idempotent and checked against the latest
	// record, and the last writer wins.
	writeMu sync.Mutex

	mu struct {
		sync.Mutex
		recs map[Name]versionsRecord
		// next is the offset after the last record applied.
		next int64
		// advanced is closed (and replaced) whenever next moves.
		advanced chan struct{}
		// notify wakes each view's supervisor on a change of its record.
		notify map[Name]chan struct{}
	}
}

// openVersionLog creates the versions topic if needed and reads it to its end, so that the
// runtime decides what to run from the latest records.
func openVersionLog(ctx context.Context, base []kgo.Opt, name string, rf int16, logger *slog.Logger) (*versionLog, error) {
	l := &versionLog{topic: name, log: logger}
	l.mu.recs, l.mu.notify, l.mu.advanced = map[Name]versionsRecord{}, map[Name]chan struct{}{}, make(chan struct{})
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, base...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{name: {0: kgo.NewOffset().AtStart()}}),
		kgo.ProducerLinger(0))...)
	if err != nil {
		return nil, fmt.Errorf("views: versions topic client: %w", err)
	}
	l.cl = cl
	adm := kadm.NewClient(cl)
	compact := "compact"
	if _, err := ensureTopic(ctx, adm, name, 1, rf, map[string]*string{"cleanup.policy": &compact}); err != nil {
		cl.Close()
		return nil, fmt.Errorf("views: %w", err)
	}
	if err := waitTopics(ctx, adm, []string{name}); err != nil {
		cl.Close()
		return nil, err
	}
	ends, err := adm.ListEndOffsets(ctx, name)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("views: end of versions topic %s: %w", name, err)
	}
	end, _ := ends.Lookup(name, 0)
	for l.position() < end.Offset {
		if err := l.pollOnce(ctx); err != nil {
			cl.Close()
			return nil, err
		}
	}
	return l, nil
}

// run follows the topic until ctx ends.
func (l *versionLog) run(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := l.pollOnce(ctx); err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

func (l *versionLog) close() { l.cl.Close() }

func (l *versionLog) pollOnce(ctx context.Context) error {
	fs := l.cl.PollFetches(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ferr error
	fs.EachError(func(t string, p int32, err error) {
		if !kgoRetriable(err) {
			ferr = fmt.Errorf("views: read versions topic %s: %w", t, err)
		}
		l.log.Warn("views: read versions topic", "err", err)
	})
	if ferr != nil {
		return ferr
	}
	fs.EachRecord(l.apply)
	return nil
}

// apply takes one record of the topic; a malformed one is logged and skipped (it cannot be
// dead-lettered: nobody would act on it, and the next transition rewrites the view's record).
func (l *versionLog) apply(r *kgo.Record) {
	view := Name(r.Key)
	var rec versionsRecord
	err := json.Unmarshal(r.Value, &rec)
	if err != nil {
		l.log.Error("views: malformed record in the versions topic; skipped", "offset", r.Offset, "view", view, "err", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && r.Value != nil {
		l.mu.recs[view] = rec
		if c := l.mu.notify[view]; c != nil {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
	l.mu.next = r.Offset + 1
	close(l.mu.advanced)
	l.mu.advanced = make(chan struct{})
}

func (l *versionLog) position() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.next
}

// get returns the latest record of view.
func (l *versionLog) get(view Name) (versionsRecord, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec, ok := l.mu.recs[view]
	return rec.clone(), ok
}

// watch returns a channel that receives (coalesced) whenever view's record changes.
func (l *versionLog) watch(view Name) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.mu.notify[view]
	if c == nil {
		c = make(chan struct{}, 1)
		l.mu.notify[view] = c
	}
	return c
}

// update applies fn to view's latest record and, when fn reports a change, writes the result
// and waits until this instance follows it, so that the caller reads its own write.
func (l *versionLog) update(ctx context.Context, view Name, fn func(rec versionsRecord, ok bool) (versionsRecord, bool, error)) (versionsRecord, error) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	rec, ok := l.get(view)
	next, changed, err := fn(rec, ok)
	if err != nil || !changed {
		return rec, err
	}
	raw, err := json.Marshal(next)
	if err != nil {
		return rec, fmt.Errorf("views: encode versions record: %w", err)
	}
	res := l.cl.ProduceSync(ctx, &kgo.Record{Topic: l.topic, Partition: 0, Key: []byte(view), Value: raw})
	if err := res.FirstErr(); err != nil {
		return rec, fmt.Errorf("views: write versions topic %s: %w", l.topic, err)
	}
	r, _ := res.First()
	if err := l.waitFor(ctx, r.Offset+1); err != nil {
		return rec, err
	}
	return next, nil
}

// waitFor blocks until the follower has applied the records before offset.
func (l *versionLog) waitFor(ctx context.Context, offset int64) error {
	for {
		l.mu.Lock()
		next, advanced := l.mu.next, l.mu.advanced
		l.mu.Unlock()
		if next >= offset {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-advanced:
		}
	}
}
