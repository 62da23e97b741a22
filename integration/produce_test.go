package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/serve/client"
)

// TestServeReadYourProducedRecords produces trades and at once reads price-range with the
// Go client, naming each produced record (client.AfterRecord: min_offsets=
// trades:partition:offset), through `tarn serve`, under both guarantees: every read must see
// its trade. The trades topic is read by the sub-topology before price-range's repartition by
// symbol, so the wait covers both. A topic the view does not read is a 400 that names it and
// the view's inputs, and a view not fed by CDC answers without an LSN.
func TestServeReadYourProducedRecords(t *testing.T) {
	for _, eos := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly-once=%t", eos), func(t *testing.T) { readYourProducedRecords(t, eos) })
	}
}

func readYourProducedRecords(t *testing.T, exactlyOnce bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	brokers := testenv.Kafka(t)
	pg := testenv.Postgres(t)
	bin := buildTarn(t)
	app := fmt.Sprintf("ryp%d", time.Now().UnixNano()%1e9)
	migrate(ctx, t, pg)
	createEventTopics(ctx, t, brokers)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	in := startServe(t, bin, "--app", app, "--kafka", strings.Join(brokers, ","), "--postgres", pg,
		fmt.Sprintf("--exactly-once=%t", exactlyOnce))
	waitReady(t, in, 2*time.Minute, "readyz")
	c := client.New(in.base)

	// Symbols of this run only (the topic is shared), several so that the trades spread over
	// partitions on both sides of the repartition.
	syms := []string{"P" + app + "a", "P" + app + "b", "P" + app + "c"}
	const iterations = 200
	want := map[string]int{}
	var waits []time.Duration
	for i := range iterations {
		sym := syms[i%len(syms)]
		v, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("%s-%d", app, i), "symbol": sym, "price": 100 + i, "qty": 1, "time": time.Now().UTC()})
		// Keyed by trade id, as the example producer does: the record's partition is not the
		// symbol's partition of the view.
		r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: "trades", Key: []byte(fmt.Sprintf("%s-%d", app, i)), Value: v}).First()
		if err != nil {
			t.Fatal(err)
		}
		want[sym]++
		began := time.Now()
		rd, err := c.Get(ctx, "price-range", sym, client.AfterRecord(r.Topic, r.Partition, r.Offset), client.Wait(20*time.Second))
		waits = append(waits, time.Since(began))
		if err != nil {
			t.Fatalf("trade %d (%s, trades/%d@%d): %v", i, sym, r.Partition, r.Offset, err)
		}
		var got struct{ Count int }
		if err := json.Unmarshal(rd.Value, &got); err != nil {
			t.Fatal(err)
		}
		if got.Count != want[sym] {
			t.Fatalf("trade %d (%s, trades/%d@%d): read %d trades, want %d: %s", i, sym, r.Partition, r.Offset, got.Count, want[sym], rd.Value)
		}
		if rd.Position.LSN != 0 {
			t.Fatalf("price-range is not fed by CDC, yet its answer carries LSN %s", rd.Position.LSN)
		}
	}
	slices.Sort(waits)
	t.Logf("exactly-once=%t: %d trades, each read with min_offsets=trades:p:o saw its trade; read wait p50 %s, p99 %s, max %s",
		exactlyOnce, iterations, waits[len(waits)/2].Round(time.Millisecond),
		waits[len(waits)*99/100].Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond))

	// A record far ahead is not reached: 503 not-caught-up with Retry-After and the position.
	_, err = c.Get(ctx, "price-range", syms[0], client.AfterRecord("trades", 0, 1<<40), client.Wait(200*time.Millisecond))
	var p *client.Problem
	if !errors.Is(err, client.ErrNotCaughtUp) || !errors.As(err, &p) || p.RetryAfter <= 0 || p.Position == nil || len(p.Position.Offsets) == 0 {
		t.Fatalf("a record never written: %v (%+v)", err, p)
	}
	// A topic the view does not read: 400 naming it and the view's inputs.
	_, err = c.Get(ctx, "price-range", syms[0], client.AfterRecord("clicks", 0, 0))
	if !errors.As(err, &p) || p.Status != http.StatusBadRequest || p.Param != "min_offsets" ||
		!strings.Contains(p.Detail, `"clicks"`) || !strings.Contains(p.Detail, "trades") {
		t.Fatalf("a topic price-range does not read: %v (%+v)", err, p)
	}
}
