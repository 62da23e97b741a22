package views

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// lagInterval is how often an engine measures its lag.
const lagInterval = time.Second

// measureLag sets, every lagInterval until ctx ends, the lag of every input partition this
// instance runs: the partition's end (its last stable offset, what a read-committed consumer
// can reach) minus the offset after the last batch applied here (queryable), or minus the
// group's committed offset before this session applied any. The end is listed from Kafka:
// the high watermark of a fetch is as old as the fetch, and under load the client holds
// fetches polled long ago, so a lag taken from them read 0 while a backlog waited.
//
// It is also the session's watchdog: when no batch was applied for Config.StallTimeout while
// records wait and nothing restores, the view is stalled; the watchdog logs it, shows it
// failing and closes the client, so that the session ends and a new one starts (errStalled,
// a transient failure). View code that never returns cannot be interrupted, but is shown.
func (e *engine) measureLag(ctx context.Context, cl *kgo.Client) {
	adm := kadm.NewClient(cl)
	tick := time.NewTicker(lagInterval)
	defer tick.Stop()
	last, since := e.processed.Load(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		waiting := e.noteLag(ctx, adm)
		if n := e.processed.Load(); n != last || waiting == 0 || e.restoringAny() || e.holding() {
			last, since = n, time.Now()
			continue
		}
		if stalled := time.Since(since); stalled >= e.rt.cfg.StallTimeout {
			err := fmt.Errorf("%w: no batch applied for %s while %d input records wait", errStalled, stalled.Round(time.Second), waiting)
			e.log.Error("views: the view is stalled; starting a new Kafka client", "err", err)
			e.failing(err)
			e.stalled.Store(true)
			cl.Close()
			return
		}
	}
}

// errStalled ends a session that the watchdog found stalled; the engine starts another.
var errStalled = errors.New("views: stalled")

func (e *engine) restoringAny() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.mu.restoring) > 0
}

// noteLag measures and records the lag; it returns the records waiting in all (0 when it
// could not measure).
func (e *engine) noteLag(ctx context.Context, adm *kadm.Client) int64 {
	e.mu.Lock()
	owned := map[string][]int32{}
	for id := range e.mu.tasks {
		for _, src := range e.v.subs[id.sub].sources {
			name := e.env.resolve(src.topic)
			owned[name] = append(owned[name], id.part)
		}
	}
	e.mu.Unlock()
	if len(owned) == 0 {
		return 0
	}
	topics := make([]string, 0, len(owned))
	for t := range owned {
		topics = append(topics, t)
	}
	rctx, cancel := context.WithTimeout(ctx, lagInterval)
	defer cancel()
	ends, err := adm.ListCommittedOffsets(rctx, topics...)
	if err != nil {
		return 0 // Kafka unreachable: the failing state says so; the last lag stands
	}
	committed, _ := adm.FetchOffsets(rctx, e.group)
	lag := map[string]int64{}
	e.mu.Lock()
	for t, ps := range owned {
		for _, p := range ps {
			end, ok := ends.Lookup(t, p)
			if !ok || end.Err != nil {
				continue
			}
			at := e.mu.consumed[t][p]
			if c, ok := committed.Lookup(t, p); ok && c.At > at {
				at = c.At
			}
			lag[t+"/"+strconv.Itoa(int(p))] = max(end.Offset-at, 0)
		}
	}
	e.mu.lag = lag
	e.mu.Unlock()
	var waiting int64
	for _, v := range lag {
		waiting += v
	}
	if e.serving.Load() { // a rebuilding version's lag is measured over all instances (progress.go)
		e.rt.metrics.lag.DeletePartialMatch(map[string]string{"view": string(e.v.name)})
		for k, v := range lag {
			t, p := splitTopicPartition(k)
			e.rt.metrics.lag.WithLabelValues(string(e.v.name), t, p).Set(float64(v))
		}
	}
	return waiting
}

// splitTopicPartition splits a "topic/partition" lag key.
func splitTopicPartition(k string) (string, string) {
	i := strings.LastIndexByte(k, '/')
	return k[:i], k[i+1:]
}
