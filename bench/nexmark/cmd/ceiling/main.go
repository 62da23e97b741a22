// Command ceiling reads the Nexmark topics end to end with a plain franz-go consumer, decoding
// nothing, and prints one JSON line with its rate: the ceiling any processor on this broker can
// reach. Example:
//
//	ceiling -brokers 127.0.0.1:9092 -topics nexmark-person,nexmark-auction,nexmark-bid
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/tarnhq/tarn/bench/nexmark"
)

func main() {
	brokers := flag.String("brokers", os.Getenv("TARN_TEST_KAFKA_BROKERS"), "seed brokers, comma-separated (default $TARN_TEST_KAFKA_BROKERS)")
	topics := flag.String("topics", "nexmark-person,nexmark-auction,nexmark-bid", "topics to read, comma-separated")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var seeds []string
	if *brokers != "" {
		seeds = strings.Split(*brokers, ",")
	}
	stats, err := nexmark.Consume(ctx, seeds, strings.Split(*topics, ","))
	if err != nil {
		fmt.Fprintln(os.Stderr, "ceiling:", err)
		os.Exit(1)
	}
	secs := stats.Duration.Seconds()
	out, _ := json.Marshal(map[string]any{
		"records": stats.Records, "bytes": stats.Bytes, "seconds": secs,
		"recordsPerSec": stats.RecordsPerSecond(), "mbPerSec": float64(stats.Bytes) / secs / 1e6,
	})
	fmt.Println(string(out))
}
