// Command compare reads two systems' output topics of one Nexmark query and prints one JSON
// line saying whether they are equal by bench/README.md's rules (see package outputs). It exits
// 0 when it could compare, whatever the verdict, and 1 when it could not. Example:
//
//	compare -brokers 127.0.0.1:9092 -query q7 -a nexmark-tarn-q7-out -b nexmark-kstreams-q7-out
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/tarnhq/tarn/bench/outputs"
)

func main() {
	brokers := flag.String("brokers", os.Getenv("TARN_TEST_KAFKA_BROKERS"), "seed brokers, comma-separated (default $TARN_TEST_KAFKA_BROKERS)")
	query := flag.String("query", "", "the query whose outputs these are (q0 ... q20): decides stream or table rules")
	a := flag.String("a", "", "first output topic")
	b := flag.String("b", "", "second output topic")
	timeout := flag.Duration("timeout", 30*time.Minute, "give up after this long")
	flag.Parse()
	out, err := run(*brokers, *query, *a, *b, *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
	fmt.Println(out)
}

func run(brokers, query, a, b string, timeout time.Duration) (string, error) {
	kind, err := outputs.KindOf(query)
	if err != nil {
		return "", err
	}
	if brokers == "" || a == "" || b == "" {
		return "", fmt.Errorf("-brokers, -a and -b are required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	seeds := strings.Split(brokers, ",")
	began := time.Now()
	sa, err := outputs.Summarize(ctx, seeds, a, kind)
	if err != nil {
		return "", err
	}
	sb, err := outputs.Summarize(ctx, seeds, b, kind)
	if err != nil {
		return "", err
	}
	v, err := outputs.Compare(sa, sb)
	if err != nil {
		return "", err
	}
	line, err := json.Marshal(struct {
		Query string `json:"query"`
		outputs.Verdict
		Seconds float64 `json:"seconds"`
	}{query, v, math.Round(time.Since(began).Seconds()*1000) / 1000})
	return string(line), err
}
