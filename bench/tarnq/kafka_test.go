package tarnq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"maps"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/bench/nexmark"
	"github.com/tarnhq/tarn/bench/outputs"
	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/state"
	"github.com/tarnhq/tarn/views"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// input is one generated Nexmark input in Kafka, and its events in event order.
type input struct {
	brokers  []string
	prefix   string
	topics   nexmark.Topics
	persons  []nexmark.Person
	auctions []nexmark.Auction
	bids     []nexmark.Bid
}

// generate writes events into fresh topics of 2 partitions.
func generate(ctx context.Context, t *testing.T, events nexmark.Config) *input {
	var suffix [4]byte
	rand.Read(suffix[:])
	in := &input{brokers: testenv.Kafka(t), prefix: "tarnq-" + hex.EncodeToString(suffix[:]) + "-"}
	in.topics = nexmark.Topics{Person: in.prefix + "person", Auction: in.prefix + "auction", Bid: in.prefix + "bid"}
	if _, err := nexmark.Write(ctx, nexmark.WriteConfig{Events: events, Brokers: in.brokers, Topics: in.topics, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	gen, err := nexmark.NewGenerator(events)
	if err != nil {
		t.Fatal(err)
	}
	var e nexmark.Event
	for n := int64(0); n < events.Events; n++ {
		switch gen.Event(n, &e); e.Kind {
		case nexmark.KindPerson:
			in.persons = append(in.persons, e.Person)
		case nexmark.KindAuction:
			in.auctions = append(in.auctions, e.Auction)
		case nexmark.KindBid:
			in.bids = append(in.bids, e.Bid)
		}
	}
	return in
}

// TestStatelessOutputs runs q1 and q2 on a real Kafka and checks every output record against
// the README's definition computed from the generator.
func TestStatelessOutputs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in := generate(ctx, t, nexmark.Config{Seed: 9, Events: 5_000, Start: time.Now().Add(-time.Hour).UnixMilli()})
	t.Run("q1", func(t *testing.T) {
		want := map[string][]EuroBid{}
		for _, b := range in.bids {
			k := strconv.FormatInt(b.Auction, 10)
			want[k] = append(want[k], EuroBid{b.Auction, b.Bidder, float64(b.Price) * 0.908, b.Channel, b.URL, b.DateTime, b.Extra})
		}
		if got := streamOutput[EuroBid](t, in.run(ctx, t, "q1", false)); !reflect.DeepEqual(got, want) {
			t.Errorf("q1 output differs from its definition")
		}
	})
	t.Run("q2", func(t *testing.T) {
		want := map[string][]AuctionPrice{}
		for _, b := range in.bids {
			if b.Auction%123 == 0 {
				k := strconv.FormatInt(b.Auction, 10)
				want[k] = append(want[k], AuctionPrice{b.Auction, b.Price})
			}
		}
		if got := streamOutput[AuctionPrice](t, in.run(ctx, t, "q2", false)); !reflect.DeepEqual(got, want) {
			t.Errorf("q2 output %v, want %v", got, want)
		}
	})
}

// run is one run of query on in: the runtime processes until [Progress] says it is done.
type run struct {
	plan    *Plan
	app     string
	brokers []string
	ctx     context.Context
}

func (in *input) run(ctx context.Context, t *testing.T, query string, exactlyOnce bool) *run {
	name := in.prefix + query
	if exactlyOnce {
		name += "-eos" // a query may run both ways on one input
	}
	r := &run{app: name, brokers: in.brokers, ctx: ctx}
	var err error
	if r.plan, err = Define(query, in.topics, name+"-out"); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(in.brokers...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := r.plan.Prepare(ctx, adm); err != nil {
		t.Fatal(err)
	}
	progress, err := r.plan.NewProgress(ctx, adm, r.app, exactlyOnce)
	if err != nil {
		t.Fatal(err)
	}
	db, err := state.Open(state.Config{Dir: t.TempDir(), MemoryBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rt, err := views.NewRuntime(views.Config{App: r.app, Brokers: in.brokers, State: db, Views: r.plan.Views,
		ExactlyOnce: exactlyOnce, TransactionTimeout: 10 * time.Second,
		ClientOpts: []kgo.Opt{kgo.MetadataMinAge(250 * time.Millisecond)}})
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
	for {
		ok, err := progress.Done(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return r
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not done: %v", query, ctx.Err())
		case err := <-done:
			done <- err
			t.Fatalf("%s: runtime stopped: %v", query, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// streamOutput reads r's output by key, in order (one key is in one partition).
func streamOutput[V any](t *testing.T, r *run) map[string][]V {
	got := map[string][]V{}
	err := outputs.Read(r.ctx, r.brokers, r.plan.Output, func(rec *kgo.Record) error {
		var v V
		if err := json.Unmarshal(rec.Value, &v); err != nil {
			return err
		}
		got[string(rec.Key)] = append(got[string(rec.Key)], v)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// tableOutput reads the last value of every key of r's output.
func tableOutput[V any](t *testing.T, r *run) map[string]V {
	got := map[string]V{}
	for k, vs := range streamOutput[V](t, r) {
		got[k] = vs[len(vs)-1]
	}
	return got
}

// TestStatefulOutputs runs q5, q7, q17 and q18 on a real Kafka, two at least once and two
// exactly once, and checks their final outputs against the README's definitions computed from
// the generator's bids; q7's stores are then restored from their changelogs.
func TestStatefulOutputs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel) // after the parallel subtests
	// 200 events/s spreads 6000 events over 30 s of event time: several windows of each kind.
	in := generate(ctx, t, nexmark.Config{Seed: 3, Events: 6_000, Rate: 200, Start: time.Now().Add(-time.Hour).UnixMilli()})
	t.Run("q5", func(t *testing.T) {
		t.Parallel()
		check(t, tableOutput[HotItem](t, in.run(ctx, t, "q5", true)), hotItems(in.bids))
	})
	t.Run("q7", func(t *testing.T) {
		t.Parallel()
		r := in.run(ctx, t, "q7", false)
		want := highestBids(in.bids)
		check(t, tableOutput[HighestBid](t, r), want)
		r.checkRestore(t, want)
	})
	t.Run("q17", func(t *testing.T) {
		t.Parallel()
		check(t, tableOutput[DayStats](t, in.run(ctx, t, "q17", false)), dayStats(in.bids))
	})
	t.Run("q18", func(t *testing.T) {
		t.Parallel()
		check(t, tableOutput[nexmark.Bid](t, in.run(ctx, t, "q18", true)), lastBids(in.bids))
	})
}

func check[V comparable](t *testing.T, got, want map[string]V) {
	t.Helper()
	if maps.Equal(got, want) {
		return
	}
	n := 0
	for k, w := range want {
		if g, ok := got[k]; (!ok || g != w) && n < 5 {
			t.Errorf("key %s: got %+v (present %v), want %+v", k, g, ok, w)
			n++
		}
	}
	t.Errorf("output has %d keys, want %d", len(got), len(want))
}

// checkRestore restores q7's stores into an empty state dir and reads each window's highest
// bid from the restored "top" store.
func (r *run) checkRestore(t *testing.T, want map[string]HighestBid) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	db, err := state.Open(state.Config{Dir: t.TempDir(), MemoryBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stats, filled, err := r.plan.Restore(r.ctx, kadm.NewClient(cl), db, r.app, []kgo.Opt{kgo.SeedBrokers(r.brokers...)})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Records < int64(len(want)) || filled == 0 {
		t.Errorf("restored %d records into %d partitions; want at least the %d windows", stats.Records, filled, len(want))
	}
	got := map[string]HighestBid{}
	for _, pr := range stats.Partitions {
		if pr.ID.Store != "top" {
			continue
		}
		kv, err := db.KV(pr.ID)
		if err != nil {
			t.Fatal(err)
		}
		for key := range want {
			raw, ok, err := kv.Get(db, []byte(key))
			if err != nil {
				t.Fatal(err)
			}
			var h HighestBid
			if ok && json.Unmarshal(raw, &h) == nil {
				got[key] = h
			}
		}
	}
	check(t, got, want)
}

// The expected outputs, computed from the bids in event order (which is each partition's
// order) without views.

func hotItems(bids []nexmark.Bid) map[string]HotItem {
	size, adv := q5Size.Milliseconds(), q5Advance.Milliseconds()
	counts := map[[2]int64]int64{} // (window start, auction)
	for _, b := range bids {
		for s := floorDiv(b.DateTime, adv) * adv; s > b.DateTime-size; s -= adv {
			counts[[2]int64{s, b.Auction}]++
		}
	}
	want := map[string]HotItem{}
	for k, n := range counts {
		h := HotItem{WindowStart: k[0], WindowEnd: k[0] + size, Auction: k[1], Count: n}
		if cur, ok := want[windowKey(k[0])]; !ok || Hotter(h, cur) {
			want[windowKey(k[0])] = h
		}
	}
	return want
}

func highestBids(bids []nexmark.Bid) map[string]HighestBid {
	size := q7Window.Milliseconds()
	want := map[string]HighestBid{}
	for _, b := range bids {
		s := b.DateTime / size * size
		h := HighestBid{WindowStart: s, WindowEnd: s + size, Auction: b.Auction, Bidder: b.Bidder, Price: b.Price, DateTime: b.DateTime}
		if cur, ok := want[windowKey(s)]; !ok || Higher(h, cur) {
			want[windowKey(s)] = h
		}
	}
	return want
}

func dayStats(bids []nexmark.Bid) map[string]DayStats {
	want := map[string]DayStats{}
	for _, b := range bids {
		day := time.UnixMilli(b.DateTime).UTC().Format("2006-01-02")
		key := strconv.FormatInt(b.Auction, 10) + "/" + day
		d, ok := want[key]
		if !ok {
			d = DayStats{Auction: b.Auction, Day: day, Min: b.Price, Max: b.Price}
		}
		d.Count++
		d.Sum += b.Price
		d.Min, d.Max = min(d.Min, b.Price), max(d.Max, b.Price)
		d.Avg = float64(d.Sum) / float64(d.Count)
		want[key] = d
	}
	return want
}

func lastBids(bids []nexmark.Bid) map[string]nexmark.Bid {
	want := map[string]nexmark.Bid{}
	for _, b := range bids {
		key := strconv.FormatInt(b.Bidder, 10) + "/" + strconv.FormatInt(b.Auction, 10)
		if cur, ok := want[key]; !ok || b.DateTime >= cur.DateTime {
			want[key] = b
		}
	}
	return want
}
