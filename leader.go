package tarn

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/cdc"
	"github.com/tarnhq/tarn/internal/topic"
)

// runCDCLeader runs the CDC source on exactly one instance of the app at a time. A replication
// slot can be streamed by one connection only, and two sources racing through a first snapshot
// would drop each other's slot; so the instances elect the source's runner with Kafka's own
// group protocol: the member assigned the single partition of the source's position topic runs
// it, and when that member leaves or dies, another is assigned the partition and takes over
// from the durable position.
func runCDCLeader(ctx context.Context, cfg Config, src *cdc.Source, log *slog.Logger) error {
	slot := src.Slot()
	posTopic := topic.CDCPosition(cfg.App, slot)
	if err := ensurePositionTopic(ctx, cfg.Kafka, posTopic); err != nil {
		return err
	}
	var (
		mu      sync.Mutex
		stop    context.CancelFunc
		stopped chan struct{}
		failed  = make(chan error, 1)
	)
	start := func() {
		mu.Lock()
		defer mu.Unlock()
		if stop != nil {
			return
		}
		runCtx, cancel := context.WithCancel(ctx)
		stop, stopped = cancel, make(chan struct{})
		done := stopped
		log.Info("cdc: this instance runs the CDC source", "slot", slot)
		go func() {
			defer close(done)
			if err := runCDC(runCtx, src, log); err != nil {
				select {
				case failed <- err:
				default:
				}
			}
		}()
	}
	halt := func() {
		mu.Lock()
		defer mu.Unlock()
		if stop == nil {
			return
		}
		stop()
		<-stopped
		stop, stopped = nil, nil
		log.Info("cdc: handed the CDC source over to another instance", "slot", slot)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka...),
		kgo.ConsumerGroup(topic.Group(cfg.App, "cdc-"+slot, 1)), kgo.ConsumeTopics(posTopic),
		kgo.Balancers(kgo.RangeBalancer()), kgo.SessionTimeout(10*time.Second),
		// The callbacks run for every member on every rebalance, with what it got or lost
		// (possibly nothing).
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, got map[string][]int32) {
			if len(got[posTopic]) > 0 {
				start()
			}
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			if len(lost[posTopic]) > 0 {
				halt()
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			if len(lost[posTopic]) > 0 {
				halt()
			}
		}),
	)
	if err != nil {
		return err
	}
	defer func() { halt(); cl.Close() }()
	for {
		// Polling keeps the membership alive; the records themselves are the source's business.
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		select {
		case err := <-failed:
			return err
		default:
		}
		fs.EachError(func(t string, p int32, err error) {
			log.Warn("cdc: leader election fetch", "topic", t, "partition", p, "err", err)
		})
	}
}

// runCDC runs the source, standing by while another connection still holds the slot (a
// previous leader whose connection the server has not dropped yet).
func runCDC(ctx context.Context, src *cdc.Source, log *slog.Logger) error {
	for {
		err := src.Run(ctx)
		if !errors.Is(err, cdc.ErrSlotBusy) || ctx.Err() != nil {
			return err
		}
		log.Info("cdc: slot still held by another connection; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
	}
}

// ensurePositionTopic creates the source's position topic as the CDC source itself would
// (one partition, compacted), so that the election can join on it before the first run.
func ensurePositionTopic(ctx context.Context, brokers []string, name string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	compact := "compact"
	_, err = kadm.NewClient(cl).CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, name)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return err
	}
	return nil
}
