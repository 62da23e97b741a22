package views

import (
	"context"
	"strconv"
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
func (e *engine) measureLag(ctx context.Context, cl *kgo.Client) {
	adm := kadm.NewClient(cl)
	tick := time.NewTicker(lagInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		e.noteLag(ctx, adm)
	}
}

func (e *engine) noteLag(ctx context.Context, adm *kadm.Client) {
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
		return
	}
	topics := make([]string, 0, len(owned))
	for t := range owned {
		topics = append(topics, t)
	}
	rctx, cancel := context.WithTimeout(ctx, lagInterval)
	defer cancel()
	ends, err := adm.ListCommittedOffsets(rctx, topics...)
	if err != nil {
		return // Kafka unreachable: the failing state says so; the last lag stands
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
	if e.serving.Load() { // a rebuilding version's lag is measured over all instances (progress.go)
		e.rt.metrics.lag.DeletePartialMatch(map[string]string{"view": string(e.v.name)})
		for k, v := range lag {
			t, p := splitTopicPartition(k)
			e.rt.metrics.lag.WithLabelValues(string(e.v.name), t, p).Set(float64(v))
		}
	}
}

// splitTopicPartition splits a "topic/partition" lag key.
func splitTopicPartition(k string) (string, string) {
	for i := len(k) - 1; i >= 0; i-- {
		if k[i] == '/' {
			return k[:i], k[i+1:]
		}
	}
	return k, ""
}
