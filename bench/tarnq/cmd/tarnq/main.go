// Command tarnq runs one Nexmark query on tarn and prints one JSON line of figures, with the
// flags and output of the Kafka Streams peer (bench/README.md). Modes: run, restore (wipe the
// state dir and restore every store from its changelog), cleanup, and has (exit 0 if the query
// is implemented, 2 if not). Example:
//
//	tarnq --mode run --query q7 --brokers 127.0.0.1:9092 --output q7-out --app-id q7-alo \
//	  --guarantee at_least_once --state-dir /tmp/q7
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/bench/nexmark"
	"github.com/tarnhq/tarn/bench/tarnq"
	"github.com/tarnhq/tarn/state"
)

type options struct {
	mode, query, output, app, guarantee, stateDir string
	brokers                                       []string
	topics                                        nexmark.Topics
	timeout                                       time.Duration
	memoryMB                                      int64
	maxPollRecords                                int
	log                                           *slog.Logger
}

func main() {
	var o options
	brokers := flag.String("brokers", "", "seed brokers, comma-separated")
	flag.StringVar(&o.mode, "mode", "run", "run, restore, cleanup or has")
	flag.StringVar(&o.query, "query", "", "q0, q1, q2, q5, q7, q17 or q18")
	flag.StringVar(&o.output, "output", "", "output topic")
	flag.StringVar(&o.app, "app-id", "", "tarn application id")
	flag.StringVar(&o.guarantee, "guarantee", "at_least_once", "at_least_once or exactly_once_v2")
	flag.StringVar(&o.stateDir, "state-dir", "", "Pebble directory")
	flag.StringVar(&o.topics.Person, "person-topic", "nexmark-person", "topic of persons")
	flag.StringVar(&o.topics.Auction, "auction-topic", "nexmark-auction", "topic of auctions")
	flag.StringVar(&o.topics.Bid, "bid-topic", "nexmark-bid", "topic of bids")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up after this long")
	flag.Int64Var(&o.memoryMB, "memory-mb", 256, "Pebble memory budget (memtables and block cache), MiB")
	flag.IntVar(&o.maxPollRecords, "max-poll-records", 0, "records per batch (0: views' default)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	var level slog.Level
	flag.TextVar(&level, "log-level", slog.LevelWarn, "least level logged to stderr: DEBUG, INFO, WARN or ERROR")
	// Accepted for the peer's command line; tarn's runtime sizes its own concurrency and
	// commits once per polled batch.
	flag.Int("threads", 2, "ignored")
	flag.Int("commit-interval-ms", 0, "ignored")
	flag.Parse()
	o.brokers = strings.Split(*brokers, ",")
	o.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tarnq:", err)
		os.Exit(1)
	}
	out, err := run(o)
	stopProfile()
	if errors.Is(err, tarnq.ErrNotImplemented) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tarnq:", err)
		os.Exit(1)
	}
	if out != "" {
		fmt.Println(out)
	}
}

// startCPUProfile writes a CPU profile to path until the returned function is called; an
// empty path profiles nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// client returns the options of every Kafka client. Topics are created just before they are
// used, so metadata is refreshed often (the default waits 5 s between refreshes, which the
// first batch would then wait for); this costs nothing once the run is going.
func (o options) client() []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(o.brokers...), kgo.MetadataMinAge(250 * time.Millisecond)}
}

func run(o options) (string, error) {
	if o.mode == "has" {
		_, err := tarnq.Define(o.query, o.topics, "probe") // --output is not needed to ask
		return "", err
	}
	plan, err := tarnq.Define(o.query, o.topics, o.output)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	cl, err := kgo.NewClient(o.client()...)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	switch o.mode {
	case "cleanup":
		return cleanup(ctx, adm, plan, o)
	case "run":
		return process(ctx, adm, plan, o)
	case "restore":
		return restore(ctx, adm, plan, o)
	}
	return "", fmt.Errorf("--mode %s: use run, restore, cleanup or has", o.mode)
}

// restore wipes the state dir and restores every store of the query from its changelogs.
func restore(ctx context.Context, adm *kadm.Client, plan *tarnq.Plan, o options) (string, error) {
	if err := os.RemoveAll(o.stateDir); err != nil {
		return "", err
	}
	db, err := state.Open(state.Config{Dir: o.stateDir, MemoryBytes: o.memoryMB << 20, Logger: o.log})
	if err != nil {
		return "", err
	}
	defer db.Close()
	wallStart := time.Now()
	stats, partitions, err := plan.Restore(ctx, adm, db, o.app, o.client())
	if err != nil {
		return "", err
	}
	secs := stats.Elapsed.Seconds()
	return fmt.Sprintf(`{"system":"tarn","mode":"restore","query":%q,"guarantee":%q,"records":%d,"seconds":%.3f,`+
		`"recordsPerSec":%.1f,"changelogPartitions":%d,"wallSeconds":%.3f}`, o.query, o.guarantee, stats.Records, secs,
		float64(stats.Records)/max(secs, 1e-9), partitions, time.Since(wallStart).Seconds()), nil
}

// cleanup deletes the output topic and every topic of the application.
func cleanup(ctx context.Context, adm *kadm.Client, plan *tarnq.Plan, o options) (string, error) {
	doomed, err := plan.Topics(ctx, adm, o.app)
	if err != nil {
		return "", err
	}
	if _, err := adm.DeleteTopics(ctx, doomed...); err != nil {
		return "", err
	}
	return fmt.Sprintf(`{"system":"tarn","mode":"cleanup","deleted":%d}`, len(doomed)), nil
}
