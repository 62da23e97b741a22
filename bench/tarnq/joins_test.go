package tarnq

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tarnhq/tarn/bench/nexmark"
)

// TestJoinOutputs runs q3, q8 and q20 on a real Kafka (q8 exactly once, q20 both ways) and
// checks each output, as a multiset of (key, value), against the README's definitions
// computed from the generator's events in event order.
func TestJoinOutputs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel) // after the parallel subtests
	// 200 events/s spreads 6000 events over 30 s of event time: three q8 windows, and sellers
	// and bids that name persons and auctions created after them (which must not match).
	in := generate(ctx, t, nexmark.Config{Seed: 5, Events: 6_000, Rate: 200, Start: time.Now().Add(-time.Hour).UnixMilli()})
	t.Run("q3", func(t *testing.T) {
		t.Parallel()
		checkStream(t, streamOutput[LocalItem](t, in.run(ctx, t, "q3", false)), localItems(in.persons, in.auctions))
	})
	t.Run("q8", func(t *testing.T) {
		t.Parallel()
		checkStream(t, streamOutput[NewSeller](t, in.run(ctx, t, "q8", true)), newSellers(in.persons, in.auctions))
	})
	t.Run("q20", func(t *testing.T) {
		t.Parallel()
		checkStream(t, streamOutput[BidWithAuction](t, in.run(ctx, t, "q20", false)), category10Bids(in.auctions, in.bids))
	})
	// The auction table is all in its topic before the run, so the co-table catches up
	// outside the batch transaction (views' side reader) before the first bid.
	t.Run("q20-exactly-once", func(t *testing.T) {
		t.Parallel()
		checkStream(t, streamOutput[BidWithAuction](t, in.run(ctx, t, "q20", true)), category10Bids(in.auctions, in.bids))
	})
}

// checkStream compares got and want as multisets of values per key.
func checkStream[V any](t *testing.T, got, want map[string][]V) {
	t.Helper()
	if len(want) == 0 {
		t.Fatal("the definition yields no output for this input; choose another seed")
	}
	n := 0
	keys := slices.Collect(maps.Keys(want))
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		g, w := encoded(t, got[k]), encoded(t, want[k])
		if !slices.Equal(g, w) && n < 5 {
			t.Errorf("key %s: got %v, want %v", k, g, w)
			n++
		}
	}
	if n > 0 {
		t.Errorf("output has %d keys, want %d", len(got), len(want))
	}
}

// encoded returns vs as sorted JSON texts.
func encoded[V any](t *testing.T, vs []V) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(raw))
	}
	slices.Sort(out)
	return out
}

// The expected outputs, computed without views: a stream–table join matches a row that is not
// later than the stream record (rows are inserted once, so that is the table as of its time).

func localItems(persons []nexmark.Person, auctions []nexmark.Auction) map[string][]LocalItem {
	byID := map[int64]nexmark.Person{}
	for _, p := range persons {
		byID[p.ID] = p
	}
	want := map[string][]LocalItem{}
	for _, a := range auctions {
		p, ok := byID[a.Seller]
		if a.Category != 10 || !ok || p.DateTime > a.DateTime || (p.State != "OR" && p.State != "ID" && p.State != "CA") {
			continue
		}
		k := strconv.FormatInt(a.Seller, 10)
		want[k] = append(want[k], LocalItem{Name: p.Name, City: p.City, State: p.State, ID: a.ID})
	}
	return want
}

func newSellers(persons []nexmark.Person, auctions []nexmark.Auction) map[string][]NewSeller {
	want := map[string][]NewSeller{}
	for _, p := range persons {
		start := p.DateTime / 10_000 * 10_000
		for _, a := range auctions {
			if a.Seller == p.ID && a.DateTime/10_000*10_000 == start {
				k := strconv.FormatInt(p.ID, 10)
				want[k] = append(want[k], NewSeller{ID: p.ID, Name: p.Name, WindowStart: start, Auction: a.ID})
			}
		}
	}
	return want
}

func category10Bids(auctions []nexmark.Auction, bids []nexmark.Bid) map[string][]BidWithAuction {
	byID := map[int64]nexmark.Auction{}
	for _, a := range auctions {
		byID[a.ID] = a
	}
	want := map[string][]BidWithAuction{}
	for _, b := range bids {
		a, ok := byID[b.Auction]
		if !ok || a.Category != 10 || a.DateTime > b.DateTime {
			continue
		}
		k := strconv.FormatInt(b.Auction, 10)
		want[k] = append(want[k], BidWithAuction{Auction: b.Auction, Bidder: b.Bidder, Price: b.Price, Channel: b.Channel,
			URL: b.URL, DateTime: b.DateTime, ItemName: a.ItemName, Description: a.Description, InitialBid: a.InitialBid,
			Reserve: a.Reserve, Expires: a.Expires, Seller: a.Seller, Category: a.Category})
	}
	return want
}
