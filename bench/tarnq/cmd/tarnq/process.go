package main

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/bench/tarnq"
	"github.com/tarnhq/tarn/state"
	"github.com/tarnhq/tarn/views"
)

// process runs the query from the start of its inputs until [tarnq.Progress] says every
// input record went all the way through, then stops the runtime, which commits the batch in
// hand.
func process(ctx context.Context, adm *kadm.Client, plan *tarnq.Plan, o options) (string, error) {
	if err := plan.Prepare(ctx, adm); err != nil {
		return "", err
	}
	o.log.Info("tarnq: output topic ready", "query", o.query)
	eos := o.guarantee == "exactly_once_v2"
	progress, err := plan.NewProgress(ctx, adm, o.app, eos)
	if err != nil {
		return "", err
	}
	db, err := state.Open(state.Config{Dir: o.stateDir, MemoryBytes: o.memoryMB << 20, Logger: o.log})
	if err != nil {
		return "", err
	}
	defer db.Close()
	reg := prometheus.NewRegistry()
	sent := &produced{output: plan.Output, internal: plan.Internal(o.app)}
	rt, err := views.NewRuntime(views.Config{App: o.app, Brokers: o.brokers, State: db, Views: plan.Views,
		ExactlyOnce: eos, MaxPollRecords: o.maxPollRecords, Registerer: reg, Logger: o.log, ClientOpts: append(o.client()[1:], kgo.WithHooks(sent))})
	if err != nil {
		return "", err
	}
	wallStart := time.Now()
	o.log.Info("tarnq: runtime starting", "query", o.query, "inputRecords", progress.Records())
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	first, last, err := watch(ctx, reg, progress, done)
	o.log.Info("tarnq: done; stopping the runtime", "query", o.query, "first", first, "last", last, "err", err)
	stop()
	if runErr := <-done; err == nil {
		err = runErr
	}
	if err != nil {
		return "", err
	}
	secs := last.Sub(first).Seconds()
	records := progress.Records()
	return fmt.Sprintf(`{"system":"tarn","mode":"run","query":%q,"guarantee":%q,"records":%d,"seconds":%.3f,`+
		`"recordsPerSec":%.1f,"outputs":%d,"repartitioned":%d,"wallSeconds":%.3f}`, o.query, o.guarantee, records, secs,
		float64(records)/max(secs, 1e-9), sent.outputs.Load(), sent.repartitioned.Load(), time.Since(wallStart).Seconds()), nil
}

// produced counts the records Kafka acknowledged to the output and to internal topics.
type produced struct {
	output                 string
	internal               []string
	outputs, repartitioned atomic.Int64
}

func (p *produced) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	switch {
	case err != nil:
	case r.Topic == p.output:
		p.outputs.Add(1)
	case slices.Contains(p.internal, r.Topic):
		p.repartitioned.Add(1)
	}
}

// watch polls the runtime's processed-records counter every 5 ms, noting when it first and
// last changed, and asks progress every 100 ms whether the run is done.
func watch(ctx context.Context, reg *prometheus.Registry, progress *tarnq.Progress, done <-chan error) (first, last time.Time, err error) {
	var seen int64
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	check := time.NewTicker(100 * time.Millisecond)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return first, last, fmt.Errorf("tarnq: %d records processed (of %d inputs and what they repartition): %w",
				seen, progress.Records(), ctx.Err())
		case err := <-done:
			return first, last, fmt.Errorf("tarnq: runtime stopped after %d records: %v", seen, err)
		case now := <-tick.C:
			n, err := processed(reg)
			if err != nil {
				return first, last, err
			}
			if n > 0 && first.IsZero() {
				first = now
			}
			if n != seen {
				seen, last = n, now
			}
		case <-check.C:
			if seen < progress.Streamed() {
				continue
			}
			ok, err := progress.Done(ctx)
			if err != nil || !ok {
				if err != nil {
					return first, last, err
				}
				continue
			}
			// The last batch was counted before it committed, so a tick has seen it unless
			// it came in the last 5 ms.
			if n, err := processed(reg); err == nil && n != seen {
				last = time.Now()
			}
			return first, last, nil
		}
	}
}

func processed(reg *prometheus.Registry) (int64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "tarn_views_records_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return int64(n), nil
}
