package tarn

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

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

func newCDCPosition(cfg Config, slot string, log *slog.Logger) (*cdcPosition, error) {
	name := topic.CDCPosition(cfg.App, slot)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka...), kgo.ConsumeTopics(name),
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
				c.log.Warn("tarn: unreadable CDC position record", "topic", r.Topic, "offset", r.Offset, "err", err)
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
func (c *cdcPosition) waitApplied(ctx context.Context, rt *views.Runtime, view views.Name, lsn uint64) error {
	if err := c.waitDurable(ctx, lsn); err != nil {
		return err
	}
	topics, err := rt.CDCTopics(view)
	if err != nil || len(topics) == 0 {
		return err
	}
	listed, err := c.adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("tarn: list the ends of %v: %w", topics, err)
	}
	ends := map[string]map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) {
		if ends[o.Topic] == nil {
			ends[o.Topic] = map[int32]int64{}
		}
		ends[o.Topic][o.Partition] = o.Offset
	})
	return rt.WaitApplied(ctx, view, ends)
}
