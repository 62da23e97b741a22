package tarn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/cdc"
	"github.com/tarnhq/tarn/internal/topic"
)

// Retry delays of the CDC source after a transient error: doubling from the first to the
// last, which is also how long a run must have lasted to count as recovered.
const (
	cdcFirstRetry = time.Second
	cdcLastRetry  = 30 * time.Second
)

// runCDCLeader runs the CDC source on exactly one instance of the app at a time. A replication
// slot can be streamed by one connection only, and two sources racing through a first snapshot
// would drop each other's slot; so the instances elect the source's runner with Kafka's own
// group protocol: the member assigned the single partition of the source's position topic runs
// it, and when that member leaves or dies, another is assigned the partition and takes over
// from the durable position.
//
// It returns the source's error when that is permanent (cdc.IsPermanent), so that the process
// exits saying what to fix; transient errors are retried here, with their state in health.
func runCDCLeader(ctx context.Context, cfg Config, src *cdc.Source, health *cdcHealth, log *slog.Logger) error {
	slot := src.Slot()
	posTopic := topic.CDCPosition(cfg.App, slot)
	err := retryTransient(ctx, health, log, func() error { return ensurePositionTopic(ctx, cfg.Kafka, posTopic) })
	if err != nil || ctx.Err() != nil {
		return err
	}
	// The election's poll blocks until a record arrives on a topic that rarely gets one, so a
	// failed run cancels the poll to be seen at once.
	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
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
			if err := runCDC(runCtx, src, health, log); err != nil {
				select {
				case failed <- err:
				default:
				}
				stopPolling()
			}
		}()
	}
	halt := func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		if stop == nil {
			return
		}
		stop()
		<-stopped
		stop, stopped = nil, nil
		log.Info(msg, "slot", slot)
	}
	const handedOver = "cdc: handed the CDC source over to another instance"
	group := topic.Group(cfg.App, "cdc-"+slot, 1)
	opts := []kgo.Opt{kgo.SeedBrokers(cfg.Kafka...),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(posTopic),
		kgo.Balancers(kgo.RangeBalancer()), kgo.SessionTimeout(sessionTimeout(cfg)), kgo.HeartbeatInterval(time.Second),
		// The callbacks run for every member on every rebalance, with what it got or lost
		// (possibly nothing).
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, got map[string][]int32) {
			if len(got[posTopic]) > 0 {
				start()
			}
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			if len(lost[posTopic]) > 0 {
				halt(handedOver)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			if len(lost[posTopic]) > 0 {
				halt("cdc: lost the election (this instance's group session ended); stopped the CDC source for another instance to run")
			}
		}),
	}
	// A static member, as in the views' groups: the leader restarted after a crash takes the
	// source back at once instead of after its predecessor's session expires.
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	// Stopping here before the client leaves the group keeps the revoke callback, which the
	// leave runs, from reporting this shutdown as a handover. A static member does not leave
	// as it closes: it is removed by its instance id, so that another instance takes over at
	// once.
	defer func() {
		halt("cdc: stopped the CDC source")
		cl.Close()
		leaveStatic(cfg, group, log)
	}()
	var lastWarn time.Time
	for {
		// Polling keeps the membership alive; the records themselves are the source's business.
		fs := cl.PollFetches(pollCtx)
		select {
		case err := <-failed:
			return err
		default:
		}
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(t string, p int32, err error) {
			// Kafka being away makes every poll fail at once: one line per delay is enough.
			if time.Since(lastWarn) >= cdcLastRetry {
				lastWarn = time.Now()
				log.Warn("cdc: leader election fetch", "topic", t, "partition", p, "err", err)
			}
		})
	}
}

// runCDC runs the source until ctx ends or it fails permanently, retrying transient errors
// (Postgres or Kafka away, a reset connection, the slot still held by a previous leader's
// connection that the server has not dropped yet) with growing delays.
func runCDC(ctx context.Context, src *cdc.Source, health *cdcHealth, log *slog.Logger) error {
	attempt := 0
	for {
		began := time.Now()
		err := src.Run(ctx)
		if err == nil || ctx.Err() != nil {
			health.set("") // stopped here: it runs elsewhere, or the process ends
			return nil
		}
		if cdc.IsPermanent(err) {
			health.set(err.Error())
			return err
		}
		if time.Since(began) > cdcLastRetry {
			attempt = 0 // it ran a while: this is a new failure, not the last one again
		}
		attempt++
		delay := retryDelay(attempt)
		busy := errors.Is(err, cdc.ErrSlotBusy)
		if busy {
			delay = 2 * time.Second // the server drops the old connection soon; no need to back off
			log.Info("cdc: slot still held by another connection; retrying", "attempt", attempt, "retry_in", delay, "err", err)
		} else {
			log.Warn("cdc: the CDC source failed; retrying", "attempt", attempt, "retry_in", delay, "err", err)
		}
		// A first busy slot is the normal course of a handover (the previous leader's
		// connection lingers a moment), not a reason to turn the new leader unready.
		if !busy || attempt > 1 {
			health.set(fmt.Sprintf("cdc: the source's attempt %d failed; retrying in %s: %v", attempt, delay, err))
		}
		select {
		case <-ctx.Done():
			health.set("")
			return nil
		case <-time.After(delay):
		}
	}
}

// retryTransient calls fn until it succeeds, fails permanently or ctx ends, waiting between
// attempts as runCDC does.
func retryTransient(ctx context.Context, health *cdcHealth, log *slog.Logger, fn func() error) error {
	defer health.set("")
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if cdc.IsPermanent(err) {
			return err
		}
		delay := retryDelay(attempt)
		log.Warn("cdc: cannot prepare the CDC source; retrying", "attempt", attempt, "retry_in", delay, "err", err)
		health.set(fmt.Sprintf("cdc: attempt %d to prepare the source failed; retrying in %s: %v", attempt, delay, err))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
}

// retryDelay is the wait after the attempt-th failure in a row (from 1).
func retryDelay(attempt int) time.Duration {
	d := cdcFirstRetry
	for i := 1; i < attempt && d < cdcLastRetry; i++ {
		d *= 2
	}
	return min(d, cdcLastRetry)
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
		return fmt.Errorf("cdc: create position topic %s: %w", name, err)
	}
	return nil
}

// cdcHealth is what this instance knows of the CDC source, for /readyz, /v1/views and tarn
// status. Only the instance running the source knows its problems; on the others it is quiet.
type cdcHealth struct {
	src *cdc.Source // nil when the program replicates no tables
	mu  struct {
		sync.Mutex
		problem string
	}
}

// cdcTableTopics names the table topics the CDC source writes for the schema-qualified tables.
func cdcTableTopics(app string, tables []string) []string {
	names := make([]string, 0, len(tables))
	for _, t := range tables {
		schema, table, _ := strings.Cut(t, ".")
		names = append(names, topic.CDCTable(app, schema, table))
	}
	return names
}

func (h *cdcHealth) set(problem string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.problem = problem
}

// problem says why the source does not run here although it should ("" when it streams,
// runs on another instance, or is not configured). A run that streams again after a
// failure hides the failure it recovered from.
func (h *cdcHealth) problem() string {
	if h == nil || h.src == nil || h.src.Streaming() {
		return ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.problem
}

// sessionTimeout is the configured group session timeout (10s when unset, as in tests).
func sessionTimeout(cfg Config) time.Duration {
	if cfg.Session > 0 {
		return cfg.Session
	}
	return 10 * time.Second
}

// leaveStatic removes this instance, a static member, from group, so that the others take
// over its partitions without waiting for its session to expire.
func leaveStatic(cfg Config, group string, log *slog.Logger) {
	if cfg.InstanceID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka...))
	if err == nil {
		defer cl.Close()
		var res kadm.LeaveGroupResponses
		if res, err = kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(cfg.InstanceID).Reason("tarn instance stopping")); err == nil {
			err = res.Error()
		}
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		log.Warn("tarn: could not leave the group; the others take over once its session times out", "group", group, "err", err)
	}
}
