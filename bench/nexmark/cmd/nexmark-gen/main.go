// Command nexmark-gen writes Nexmark events (persons, auctions, bids) to three Kafka topics and
// prints one JSON line with its produce rate. The same -seed and -start give byte-identical
// topics. Example:
//
//	nexmark-gen -brokers 127.0.0.1:9092 -events 1000000 -partitions 4 -recreate
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/tarnhq/tarn/bench/nexmark"
)

func main() {
	var (
		cfg     nexmark.WriteConfig
		brokers = flag.String("brokers", os.Getenv("TARN_TEST_KAFKA_BROKERS"), "seed brokers, comma-separated (default $TARN_TEST_KAFKA_BROKERS)")
		start   = flag.Int64("start", 0, "event time of the first event, Unix ms (default: so that the last event is a minute before now)")
	)
	flag.Uint64Var(&cfg.Events.Seed, "seed", 0, "random seed")
	flag.Int64Var(&cfg.Events.Events, "events", 1_000_000, "number of events")
	flag.Int64Var(&cfg.Events.Rate, "rate", 10_000, "events per second of event time")
	flag.StringVar(&cfg.Topics.Person, "person-topic", "nexmark-person", "topic of persons")
	flag.StringVar(&cfg.Topics.Auction, "auction-topic", "nexmark-auction", "topic of auctions")
	flag.StringVar(&cfg.Topics.Bid, "bid-topic", "nexmark-bid", "topic of bids")
	partitions := flag.Int("partitions", 4, "partitions of each topic")
	flag.BoolVar(&cfg.Recreate, "recreate", false, "delete the topics first if they exist")
	flag.StringVar(&cfg.Compression, "compression", "none", "none, lz4, snappy, zstd or gzip")
	flag.DurationVar(&cfg.Linger, "linger", 5*time.Millisecond, "producer linger")
	batch := flag.Int("batch-bytes", 1_000_000, "largest produce batch")
	flag.IntVar(&cfg.Workers, "workers", 0, "encoding goroutines (default GOMAXPROCS)")
	flag.Parse()

	cfg.Brokers = strings.Split(*brokers, ",")
	if *brokers == "" {
		cfg.Brokers = nil
	}
	cfg.Partitions, cfg.BatchBytes = int32(*partitions), int32(*batch)
	cfg.Events.Start = *start
	if *start == 0 && cfg.Events.Rate > 0 {
		span := cfg.Events.Events * 1000 / cfg.Events.Rate
		cfg.Events.Start = time.Now().Add(-time.Minute).UnixMilli() - span
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	stats, err := nexmark.Write(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nexmark-gen:", err)
		os.Exit(1)
	}
	secs := stats.Duration.Seconds()
	out, _ := json.Marshal(map[string]any{
		"events": stats.Total(), "persons": stats.Events[nexmark.KindPerson],
		"auctions": stats.Events[nexmark.KindAuction], "bids": stats.Events[nexmark.KindBid],
		"bytes": stats.Bytes, "seconds": secs, "eventsPerSec": float64(stats.Total()) / secs,
		"mbPerSec": float64(stats.Bytes) / secs / 1e6, "compression": cfg.Compression,
		"partitions": cfg.Partitions, "seed": cfg.Events.Seed, "start": cfg.Events.Start, "rate": cfg.Events.Rate,
	})
	fmt.Println(string(out))
}
