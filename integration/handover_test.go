package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/internal/testenv"
)

// TestServeGracefulHandover runs two `tarn serve` instances of one app, reads every key in a
// loop through the one that stays while trades keep arriving, and stops the other with
// SIGTERM: it keeps answering until it has handed its partitions over and left the groups,
// and reads of its keys wait for the new owner rather than fail. No read may fail.
func TestServeGracefulHandover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	brokers := testenv.Kafka(t)
	pg := testenv.Postgres(t)
	bin := buildTarn(t)
	app := fmt.Sprintf("ho%d", time.Now().UnixNano()%1e9)
	migrate(ctx, t, pg)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	createEventTopics(ctx, t, brokers)
	symbols := make([]string, 12)
	for i := range symbols {
		symbols[i] = fmt.Sprintf("H%s-%d", app, i)
	}
	trade := func(i int) *kgo.Record {
		sym := symbols[i%len(symbols)]
		v, _ := json.Marshal(map[string]any{"id": fmt.Sprint(i), "symbol": sym, "price": 100 + i%13, "qty": 1, "time": time.Now().UTC()})
		return &kgo.Record{Topic: "trades", Key: []byte(sym), Value: v}
	}
	for i := range len(symbols) {
		if err := cl.ProduceSync(ctx, trade(i)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	args := []string{"--app", app, "--kafka", strings.Join(brokers, ","), "--postgres", pg}
	stays, leaves := startServe(t, bin, args...), startServe(t, bin, args...)
	owned := func(in *instance) int { ps, _ := priceRangeParts(in); return len(ps) }
	waitServe(t, stays, 2*time.Minute, "price-range's partitions to split between the instances", func() bool {
		return owned(stays) > 0 && owned(leaves) > 0 && owned(stays)+owned(leaves) == 3
	})
	for _, sym := range symbols {
		waitServe(t, stays, time.Minute, "price-range "+sym, func() bool {
			code, _ := get(stays.base + "/v1/views/price-range/keys/" + sym)
			return code == http.StatusOK
		})
	}

	// Trades keep arriving; a reader loops over every key through the instance that stays.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := len(symbols); loadCtx.Err() == nil; i++ {
			cl.Produce(loadCtx, trade(i), nil)
			time.Sleep(2 * time.Millisecond)
		}
	})
	var (
		mu       sync.Mutex
		reads    int
		failures []string
		slowest  time.Duration
	)
	wg.Go(func() {
		for i := 0; loadCtx.Err() == nil; i++ {
			began := time.Now()
			code, body := get(stays.base + "/v1/views/price-range/keys/" + symbols[i%len(symbols)])
			took := time.Since(began)
			mu.Lock()
			reads++
			slowest = max(slowest, took)
			if code != http.StatusOK && loadCtx.Err() == nil {
				failures = append(failures, fmt.Sprintf("%d %s", code, strings.TrimSpace(body)))
			}
			mu.Unlock()
		}
	})
	// A live watch of one of the stopping instance's keys must end with an end event that
	// says why and where to resume, not just close.
	var watchedKey string
	for _, sym := range symbols {
		if code, _ := get(leaves.base + "/v1/views/price-range/keys/" + sym + "?wait=0s"); code == http.StatusOK && ownsKey(leaves, sym) {
			watchedKey = sym
			break
		}
	}
	endEvent := make(chan string, 1)
	if watchedKey != "" {
		go func() {
			endEvent <- lastEvent(loadCtx, leaves.base+"/v1/views/price-range/keys/"+watchedKey+"?watch=sse")
		}()
	}
	time.Sleep(time.Second)
	leaves.cmd.Process.Signal(syscall.SIGTERM)
	stopped := time.Now()
	select {
	case err := <-leaves.exited:
		if err != nil {
			t.Errorf("the stopped instance exited with %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the stopped instance did not exit within 60s of SIGTERM")
	}
	exitTook := time.Since(stopped)
	waitServe(t, stays, time.Minute, "the remaining instance to own every partition", func() bool { return owned(stays) == 3 })
	tookOver := time.Since(stopped)
	time.Sleep(2 * time.Second)
	stopLoad()
	wg.Wait()

	if watchedKey != "" {
		select {
		case ev := <-endEvent:
			if !strings.Contains(ev, "event: end") || !strings.Contains(ev, `"reason":"instance-stopping"`) {
				t.Errorf("the watch of %s on the stopped instance ended with %q, want an end event with reason instance-stopping", watchedKey, ev)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("the watch of %s on the stopped instance did not end", watchedKey)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("SIGTERM: the instance exited after %s; the other owned every partition %s after the signal; %d reads, slowest %s, %d failed",
		exitTook.Round(10*time.Millisecond), tookOver.Round(10*time.Millisecond), reads, slowest.Round(time.Millisecond), len(failures))
	if len(failures) > 0 {
		t.Fatalf("%d of %d reads failed during the handover, first: %s", len(failures), reads, failures[:min(3, len(failures))])
	}
}

// ownsKey reports whether in serves key itself (its read was not forwarded).
func ownsKey(in *instance, key string) bool {
	owned, partitions := priceRangeParts(in)
	return partitions > 0 && slices.Contains(owned, partition.For([]byte(key), partitions))
}

// lastEvent reads a server-sent event stream until it ends and returns its last event.
func lastEvent(ctx context.Context, url string) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var last, cur strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "" {
			last.Reset()
			last.WriteString(cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(sc.Text() + "\n")
	}
	return last.String()
}
