package tarnq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/bench/nexmark"
	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/state"
	"github.com/tarnhq/tarn/views"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestStatelessOutputs runs q1 and q2 on a real Kafka and checks every output record against
// the README's definition computed from the generator.
func TestStatelessOutputs(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var suffix [4]byte
	rand.Read(suffix[:])
	p := "tarnq-" + hex.EncodeToString(suffix[:]) + "-"
	topics := nexmark.Topics{Person: p + "person", Auction: p + "auction", Bid: p + "bid"}
	events := nexmark.Config{Seed: 9, Events: 5_000, Start: time.Now().Add(-time.Hour).UnixMilli()}
	if _, err := nexmark.Write(ctx, nexmark.WriteConfig{Events: events, Brokers: brokers, Topics: topics, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	gen, err := nexmark.NewGenerator(events)
	if err != nil {
		t.Fatal(err)
	}
	var bids []nexmark.Bid
	var e nexmark.Event
	for n := int64(0); n < events.Events; n++ {
		if gen.Event(n, &e); e.Kind == nexmark.KindBid {
			bids = append(bids, e.Bid)
		}
	}
	t.Run("q1", func(t *testing.T) {
		want := map[string][]EuroBid{}
		for _, b := range bids {
			k := strconv.FormatInt(b.Auction, 10)
			want[k] = append(want[k], EuroBid{b.Auction, b.Bidder, float64(b.Price) * 0.908, b.Channel, b.URL, b.DateTime, b.Extra})
		}
		got := runQuery[EuroBid](ctx, t, brokers, topics, "q1", p+"q1-out", len(bids))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("q1 output differs from its definition")
		}
	})
	t.Run("q2", func(t *testing.T) {
		want := map[string][]AuctionPrice{}
		count := 0
		for _, b := range bids {
			if b.Auction%123 == 0 {
				k := strconv.FormatInt(b.Auction, 10)
				want[k] = append(want[k], AuctionPrice{b.Auction, b.Price})
				count++
			}
		}
		got := runQuery[AuctionPrice](ctx, t, brokers, topics, "q2", p+"q2-out", count)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("q2 output %v, want %v", got, want)
		}
	})
}

// runQuery runs query until its output topic holds n records and returns them by key, in
// order (one key is in one partition, so its order is the input's).
func runQuery[V any](ctx context.Context, t *testing.T, brokers []string, topics nexmark.Topics, query, output string, n int) map[string][]V {
	v, err := Define(query, topics, output)
	if err != nil {
		t.Fatal(err)
	}
	db, err := state.Open(state.Config{Dir: t.TempDir(), MemoryBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rt, err := views.NewRuntime(views.Config{App: "tarnq-test-" + query + "-" + output[6:14], Brokers: brokers,
		State: db, Views: []*views.View{v}, ClientOpts: []kgo.Opt{kgo.MetadataMinAge(250 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(output),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string][]V{}
	for seen := 0; seen < n; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: %d of %d outputs: %v", query, seen, n, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			var x V
			if err := json.Unmarshal(r.Value, &x); err != nil {
				t.Fatalf("%s output %s: %v", query, r.Value, err)
			}
			got[string(r.Key)] = append(got[string(r.Key)], x)
			seen++
		})
	}
	return got
}
