// Command tarnq runs one Nexmark query on tarn and prints one JSON line of figures, with the
// flags and output of the Kafka Streams peer (bench/README.md). Modes: run, cleanup, and has
// (exit 0 if the query is implemented, 2 if not). Example:
//
//	tarnq --mode run --query q1 --brokers 127.0.0.1:9092 --output q1-out --app-id q1-alo \
//	  --guarantee at_least_once --state-dir /tmp/q1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/bench/nexmark"
	"github.com/tarnhq/tarn/bench/tarnq"
	"github.com/tarnhq/tarn/state"
	"github.com/tarnhq/tarn/views"
)

type options struct {
	mode, query, output, app, guarantee, stateDir string
	brokers                                       []string
	topics                                        nexmark.Topics
	timeout                                       time.Duration
	memoryMB                                      int64
}

func main() {
	var o options
	brokers := flag.String("brokers", "", "seed brokers, comma-separated")
	flag.StringVar(&o.mode, "mode", "run", "run, cleanup or has")
	flag.StringVar(&o.query, "query", "", "q0, q1 or q2")
	flag.StringVar(&o.output, "output", "", "output topic")
	flag.StringVar(&o.app, "app-id", "", "tarn application id")
	flag.StringVar(&o.guarantee, "guarantee", "at_least_once", "at_least_once or exactly_once_v2")
	flag.StringVar(&o.stateDir, "state-dir", "", "Pebble directory")
	flag.StringVar(&o.topics.Person, "person-topic", "nexmark-person", "topic of persons")
	flag.StringVar(&o.topics.Auction, "auction-topic", "nexmark-auction", "topic of auctions")
	flag.StringVar(&o.topics.Bid, "bid-topic", "nexmark-bid", "topic of bids")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up after this long")
	flag.Int64Var(&o.memoryMB, "memory-mb", 256, "Pebble memory budget (memtables and block cache), MiB")
	// Accepted for the peer's command line; tarn's runtime sizes its own concurrency and
	// commits once per polled batch.
	flag.Int("threads", 2, "ignored")
	flag.Int("commit-interval-ms", 0, "ignored")
	flag.Parse()
	o.brokers = strings.Split(*brokers, ",")
	out, err := run(o)
	if errors.Is(err, tarnq.ErrNotImplemented) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tarnq:", err)
		os.Exit(1)
	}
	fmt.Println(out)
}

func run(o options) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	inputs, err := tarnq.Inputs(o.query, o.topics)
	if err != nil {
		return "", err
	}
	switch o.mode {
	case "has":
		return "", nil
	case "cleanup":
		return cleanup(ctx, o)
	case "run":
		return process(ctx, o, inputs)
	}
	return "", fmt.Errorf("--mode %s: use run, cleanup or has", o.mode)
}

func process(ctx context.Context, o options, inputs []string) (string, error) {
	v, err := tarnq.Define(o.query, o.topics, o.output)
	if err != nil {
		return "", err
	}
	records, err := inputRecords(ctx, o.brokers, inputs)
	if err != nil {
		return "", err
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	db, err := state.Open(state.Config{Dir: o.stateDir, MemoryBytes: o.memoryMB << 20, Logger: quiet})
	if err != nil {
		return "", err
	}
	defer db.Close()
	reg := prometheus.NewRegistry()
	rt, err := views.NewRuntime(views.Config{App: o.app, Brokers: o.brokers, State: db, Views: []*views.View{v},
		ExactlyOnce: o.guarantee == "exactly_once_v2", Registerer: reg, Logger: quiet})
	if err != nil {
		return "", err
	}
	wallStart := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	first, last, err := watch(ctx, reg, records, done)
	stop()
	if runErr := <-done; err == nil {
		err = runErr
	}
	if err != nil {
		return "", err
	}
	secs := last.Sub(first).Seconds()
	return fmt.Sprintf(`{"system":"tarn","mode":"run","query":%q,"guarantee":%q,"records":%d,"seconds":%.3f,`+
		`"recordsPerSec":%.1f,"wallSeconds":%.3f}`, o.query, o.guarantee, records, secs,
		float64(records)/secs, time.Since(wallStart).Seconds()), nil
}

// watch polls the runtime's processed-records counter until it reaches want, returning when
// the first and the last records were seen processed.
func watch(ctx context.Context, reg *prometheus.Registry, want int64, done <-chan error) (first, last time.Time, err error) {
	var seen int64
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for seen < want {
		select {
		case <-ctx.Done():
			return first, last, fmt.Errorf("tarnq: %d of %d records processed: %w", seen, want, ctx.Err())
		case err := <-done:
			return first, last, fmt.Errorf("tarnq: runtime stopped after %d of %d records: %v", seen, want, err)
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
		}
	}
	return first, last, nil
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

func inputRecords(ctx context.Context, brokers, topics []string) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return 0, err
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return 0, err
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset - starts[o.Topic][o.Partition].Offset })
	return n, nil
}

// cleanup deletes the output topic and every topic of the application.
func cleanup(ctx context.Context, o options) (string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.brokers...))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	list, err := adm.ListTopics(ctx)
	if err != nil {
		return "", err
	}
	var doomed []string
	for _, name := range list.Names() {
		if name == o.output || strings.HasPrefix(name, o.app+".") {
			doomed = append(doomed, name)
		}
	}
	if _, err := adm.DeleteTopics(ctx, doomed...); err != nil {
		return "", err
	}
	return fmt.Sprintf(`{"system":"tarn","mode":"cleanup","deleted":%d}`, len(doomed)), nil
}
