package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/internal/topic"
)

// TestServeAtLeastOnceDuplicateBound runs `tarn serve` at least once under about 20,000
// trades a second for a minute, watching how far the committed input offsets trail what was
// applied (the tarn_views_uncommitted_records gauge, and the group's committed offsets against
// the topic's end), then SIGKILLs it mid-stream and starts it again. The restarted instance
// processes again what was applied but not committed: the over-count of the count view must
// stay within twice the largest gap the gauge showed, the bound the README states.
func TestServeAtLeastOnceDuplicateBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	brokers := testenv.Kafka(t)
	pg := testenv.Postgres(t)
	bin := buildTarn(t)
	app := fmt.Sprintf("dup%d", time.Now().UnixNano()%1e9)
	migrate(ctx, t, pg)
	createEventTopics(ctx, t, brokers)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	symbols := make([]string, 50)
	for i := range symbols {
		symbols[i] = fmt.Sprintf("D%s-%d", app, i)
	}
	// The trades topic is shared by the tests: the gap is measured from this test's start.
	startEnds, err := adm.ListEndOffsets(ctx, "trades")
	if err != nil {
		t.Fatal(err)
	}

	dataDir := t.TempDir()
	args := []string{"--app", app, "--kafka", strings.Join(brokers, ","), "--postgres", pg}
	in := startServeIn(t, bin, dataDir, args...)
	waitReady(t, in, 2*time.Minute, "/readyz")

	var produced atomic.Int64
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	load.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; loadCtx.Err() == nil; <-tick.C {
			for range 200 { // 20,000 a second
				sym := symbols[i%len(symbols)]
				v, _ := json.Marshal(map[string]any{"id": strconv.Itoa(i), "symbol": sym, "price": 100 + i%17, "qty": 1, "time": time.Now().UTC()})
				cl.Produce(ctx, &kgo.Record{Topic: "trades", Key: []byte(sym), Value: v}, func(_ *kgo.Record, err error) {
					if err == nil {
						produced.Add(1)
					}
				})
				i++
			}
		}
	})
	// While it runs: the gauge, and the committed offsets against the end of the topic.
	group := topic.Group(app, "price-range", 1)
	var maxGauge, maxCommitGap, lastGauge int64
	watchUntil := time.Now().Add(60 * time.Second)
	for time.Now().Before(watchUntil) {
		time.Sleep(200 * time.Millisecond)
		g := uncommittedGauge(in, "price-range")
		lastGauge = g
		maxGauge = max(maxGauge, g)
		ends, err1 := adm.ListEndOffsets(ctx, "trades")
		offs, err2 := adm.FetchOffsets(ctx, group)
		if err1 != nil || err2 != nil {
			continue
		}
		var gap int64
		ends.Each(func(o kadm.ListedOffset) {
			c, ok := offs.Lookup(o.Topic, o.Partition)
			start, _ := startEnds.Lookup(o.Topic, o.Partition)
			at := start.Offset
			if ok && c.At > at {
				at = c.At
			}
			gap += o.Offset - at
		})
		maxCommitGap = max(maxCommitGap, gap)
	}
	in.cmd.Process.Signal(syscall.SIGKILL)
	<-in.exited
	stopLoad()
	load.Wait()
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	n := produced.Load()
	t.Logf("at least once, %d trades in 60s (%.0f/s): uncommitted records (gauge) at most %d, %d at the last look before the kill; committed offsets trailed the topic's end by at most %d records (applied and not)",
		n, float64(n)/60, maxGauge, lastGauge, maxCommitGap)

	in = startServeIn(t, bin, dataDir, args...)
	total := func() (int64, bool) {
		var sum int64
		for _, sym := range symbols {
			c, ok := tradeCount(in, sym)
			if !ok {
				return 0, false
			}
			sum += int64(c)
		}
		return sum, true
	}
	waitServe(t, in, 3*time.Minute, "every trade to be counted after the restart", func() bool {
		s, ok := total()
		return ok && s >= n
	})
	time.Sleep(3 * time.Second) // nothing more arrives: the count is final
	s, _ := total()
	over := s - n
	// The gauge is what was applied but not committed when a commit landed; by the kill, at
	// most one more commit round trip was applied (the next commit goes out as one lands).
	bound := 2 * maxGauge
	t.Logf("after SIGKILL and restart: counted %d of %d trades, %d counted twice (bound: twice the largest uncommitted gap the gauge showed, %d)", s, n, over, bound)
	if over > bound {
		t.Fatalf("%d trades counted twice after the kill, more than twice the largest uncommitted gap the gauge showed (%d)", over, bound)
	}
}

// uncommittedGauge reads tarn_views_uncommitted_records of view from in's /metrics (-1 when
// it cannot).
func uncommittedGauge(in *instance, view string) int64 {
	resp, err := http.Get(in.base + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	prefix := `tarn_views_uncommitted_records{view="` + view + `"} `
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return int64(f)
		}
	}
	return -1
}
