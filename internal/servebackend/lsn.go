package servebackend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/tarnhq/tarn/serve"
	"github.com/tarnhq/tarn/views"
)

// cdcPosition follows the CDC source's durable position, as it writes it to its position
// topic: every Postgres transaction that committed before that LSN is in the table topics.
// It is what turns a read's min_lsn into offsets of the table topics.
type cdcPosition struct {
	slot  string
	topic string
	cl    *kgo.Client
	adm   *kadm.Client
	log   *slog.Logger

	mu      sync.Mutex
	durable uint64
	moved   chan struct{} // closed and replaced whenever durable moves
}

func newCDCPosition(brokers []string, app, slot string, log *slog.Logger) (*cdcPosition, error) {
	name := topic.CDCPosition(app, slot)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(name),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	return &cdcPosition{slot: slot, topic: name, cl: cl, adm: kadm.NewClient(cl), log: log, moved: make(chan struct{})}, nil
}

// run reads the position topic until ctx ends.
func (c *cdcPosition) run(ctx context.Context) error {
	defer c.cl.Close()
	for {
		fs := c.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) != c.slot {
				return
			}
			var pos struct {
				Resume string `json:"resume"` // "X/Y"
			}
			err := json.Unmarshal(r.Value, &pos)
			var resume serve.LSN
			if err == nil {
				resume, err = serve.ParseLSN(pos.Resume)
			}
			if err != nil {
				c.log.Warn("servebackend: unreadable CDC position record", "topic", r.Topic, "offset", r.Offset, "err", err)
				return
			}
			c.mu.Lock()
			if uint64(resume) > c.durable {
				c.durable = uint64(resume)
				close(c.moved)
				c.moved = make(chan struct{})
			}
			c.mu.Unlock()
		})
	}
}

// waitDurable returns once every transaction that committed before lsn is in Kafka.
func (c *cdcPosition) waitDurable(ctx context.Context, lsn uint64) error {
	for {
		c.mu.Lock()
		durable, moved := c.durable, c.moved
		c.mu.Unlock()
		if durable >= lsn {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-moved:
		}
	}
}

// waitApplied returns once view has applied every change of a Postgres transaction that
// committed before lsn: the source wrote it (its durable position passed lsn), so it is below
// the table topics' ends as of then, and the view's groups and this instance got past those.
// It returns the durable position it saw before listing those ends, at or past lsn: the view
// has applied everything the source wrote up to that one too.
func (c *cdcPosition) waitApplied(ctx context.Context, rt *views.Runtime, view views.Name, lsn serve.LSN) (serve.LSN, error) {
	if err := c.waitDurable(ctx, uint64(lsn)); err != nil {
		return 0, err
	}
	c.mu.Lock()
	durable := serve.LSN(c.durable)
	c.mu.Unlock()
	topics, err := rt.CDCTopics(view)
	if err != nil || len(topics) == 0 {
		return 0, err
	}
	listed, err := c.adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return 0, fmt.Errorf("servebackend: list the ends of %v: %w", topics, err)
	}
	ends := map[string]map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) {
		if ends[o.Topic] == nil {
			ends[o.Topic] = map[int32]int64{}
		}
		ends[o.Topic][o.Partition] = o.Offset
	})
	if err := rt.WaitApplied(ctx, view, ends); err != nil {
		return 0, err
	}
	return durable, nil
}

// followIdle is how long a view's applied LSN is followed after its last read.
const followIdle = 30 * time.Second

// followPace is the least time between two rounds of a follower: answers' LSNs trail what
// is applied by about that much more.
const followPace = 100 * time.Millisecond

// appliedLSN knows, for each CDC-fed view read on this instance, the newest LSN L such that
// the view has applied everything the CDC source wrote up to L: what answers carry as their
// position's LSN. Finding that out takes admin round trips (the table topics' ends, the
// groups' committed offsets), so reads never do it: one follower per view does, in a loop of
// [cdcPosition.waitApplied] rounds (the same notion of applied as min_lsn), each from the
// newest durable position it sees, and reads take the last answer. The rounds are
// sequential, so a round's ends, listed after its LSN was durable, stand for the ends as of
// that LSN and no history of them is kept; min_lsn waits report what they proved too. A
// follower stops once its view has not been read for followIdle, and the next read starts
// it again (that read and those during the first round carry the last LSN known, maybe
// none).
//
// An LSN holds for the serving version it was proved for: committed offsets cover every
// partition (one that moves here restores its store from changelogs that were durable before
// those offsets were committed), but a rebuilt version has its own groups.
type appliedLSN struct {
	pos *cdcPosition
	rt  *views.Runtime
	log *slog.Logger
	// ctx is the followers'; close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     struct {
		sync.Mutex
		views map[views.Name]*viewLSN
	}
}

// viewLSN is what appliedLSN knows of one view.
type viewLSN struct {
	cdc       bool      // the view reads CDC table topics
	cdcOf     int       // the serving version cdc was found for; 0: not yet
	version   int       // the serving version lsn holds for
	lsn       serve.LSN // 0: none known
	lastRead  time.Time
	following bool
}

func newAppliedLSN(pos *cdcPosition, rt *views.Runtime, log *slog.Logger) *appliedLSN {
	a := &appliedLSN{pos: pos, rt: rt, log: log}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.mu.views = map[views.Name]*viewLSN{}
	return a
}

// close stops the followers and waits for them to return; nil (no CDC source) has none.
func (a *appliedLSN) close() {
	if a == nil {
		return
	}
	a.cancel()
	a.wg.Wait()
}

// of returns the LSN that view is known to have applied, 0 if none (or if it is not
// CDC-fed), for a read: it keeps the view's follower running. Take it before reading the
// data it goes with, so that the data is at least as new.
func (a *appliedLSN) of(view views.Name) serve.LSN {
	if a == nil {
		return 0
	}
	version, err := a.rt.Serving(view)
	if err != nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	v := a.mu.views[view]
	if v == nil {
		v = &viewLSN{}
		a.mu.views[view] = v
	}
	if v.cdcOf != version { // a rebuilt version may read other topics
		topics, err := a.rt.CDCTopics(view)
		if err != nil {
			return 0
		}
		v.cdc, v.cdcOf = len(topics) > 0, version
	}
	if !v.cdc {
		return 0
	}
	v.lastRead = time.Now()
	if !v.following && a.ctx.Err() == nil {
		v.following = true
		a.wg.Add(1)
		go a.follow(view)
	}
	if v.version != version {
		return 0
	}
	return v.lsn
}

// proved records that version of view has applied everything up to lsn, if it still serves.
func (a *appliedLSN) proved(view views.Name, version int, lsn serve.LSN) {
	if a == nil || lsn == 0 {
		return
	}
	if now, err := a.rt.Serving(view); err != nil || now != version {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	v := a.mu.views[view]
	if v == nil {
		// A min_lsn wait before the view's first read: a proved LSN means it is CDC-fed.
		v = &viewLSN{cdc: true, cdcOf: version}
		a.mu.views[view] = v
	}
	if v.version != version {
		v.version, v.lsn = version, 0
	}
	v.lsn = max(v.lsn, lsn)
}

// stopFollowing lets the next read of view start a follower again.
func (a *appliedLSN) stopFollowing(view views.Name) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.mu.views[view].following = false
}

// follow runs waitApplied rounds for view until it has not been read for followIdle.
func (a *appliedLSN) follow(view views.Name) {
	defer a.wg.Done()
	for a.ctx.Err() == nil {
		a.mu.Lock()
		v := a.mu.views[view]
		if time.Since(v.lastRead) > followIdle {
			v.following = false // under the lock a read checks it with
			a.mu.Unlock()
			return
		}
		from := v.lsn
		a.mu.Unlock()
		version, err := a.rt.Serving(view)
		if err == nil {
			// A bounded round, so that a source that stopped moving lets the follower see
			// that its view is no longer read.
			ctx, cancel := context.WithTimeout(a.ctx, followIdle)
			var lsn serve.LSN
			lsn, err = a.pos.waitApplied(ctx, a.rt, view, from+1)
			cancel()
			if err == nil && lsn == 0 {
				a.stopFollowing(view) // the serving version reads no CDC table (any more)
				return
			}
			a.proved(view, version, lsn)
			// Paced: under steady writes a round ends at once, and back-to-back rounds would
			// cost the brokers a stream of offset fetches for an LSN a few ms fresher.
			select {
			case <-a.ctx.Done():
			case <-time.After(followPace):
			}
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && a.ctx.Err() == nil {
			a.log.Debug("servebackend: following a view's applied LSN", "view", view, "err", err)
			select {
			case <-a.ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}
