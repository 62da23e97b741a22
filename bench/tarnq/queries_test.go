package tarnq

import (
	"errors"
	"slices"
	"testing"

	"github.com/tarnhq/tarn/bench/nexmark"
	"github.com/tarnhq/tarn/internal/topic"
)

func TestDefine(t *testing.T) {
	topics := nexmark.Topics{Person: "p", Auction: "a", Bid: "b"}
	for _, query := range []string{"q0", "q1", "q2", "q5", "q7", "q17", "q18"} {
		p, err := Define(query, topics, "out")
		if err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		if len(p.Views) != 1 {
			t.Errorf("%s: %d views, want 1", query, len(p.Views))
		}
		for _, v := range p.Views {
			if v.Queryable() {
				t.Errorf("%s: view %s is served; the benchmark wants only its output topic", query, v.Name())
			}
		}
		if !slices.Equal(p.Inputs, []string{"b"}) || p.Output != "out" || p.Query != query {
			t.Errorf("%s reads %v and writes %s; want the bid topic and out", query, p.Inputs, p.Output)
		}
	}
	// The joins read two topics; the first gives the output's partition count, as the peer's.
	// A table joined is a side input, read outside the view's group ([Progress.Streamed]).
	for _, tc := range []struct {
		query           string
		inputs, grouped []string
	}{
		{"q3", []string{"p", "a"}, []string{"a"}},
		{"q8", []string{"p", "a"}, []string{"p", "a"}},
		{"q20", []string{"b", "a"}, []string{"b"}},
	} {
		p, err := Define(tc.query, topics, "out")
		if err != nil {
			t.Fatalf("%s: %v", tc.query, err)
		}
		if len(p.Views) != 1 || !slices.Equal(p.Inputs, tc.inputs) || p.Views[0].Queryable() {
			t.Errorf("%s: %d views, inputs %v; want one unserved view reading %v",
				tc.query, len(p.Views), p.Inputs, tc.inputs)
		}
		for _, in := range tc.inputs {
			if got, want := p.grouped(in), slices.Contains(tc.grouped, in); got != want {
				t.Errorf("%s: grouped(%s) = %v, want %v", tc.query, in, got, want)
			}
		}
	}
	if _, err := Define("q99", topics, "out"); !errors.Is(err, ErrNotImplemented) {
		t.Errorf("Define(q99) = %v, want ErrNotImplemented", err)
	}
}

func TestInternal(t *testing.T) {
	p, err := Define("q5", nexmark.Topics{Bid: "b"}, "out")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{topic.Repartition("app", "nexmark-q5", 1, "by-window")}
	if got := p.Internal("app"); !slices.Equal(got, want) {
		t.Errorf("Internal = %v, want %v", got, want)
	}
}

func TestChangelogStore(t *testing.T) {
	p, err := Define("q7", nexmark.Topics{Bid: "b"}, "out")
	if err != nil {
		t.Fatal(err)
	}
	v := p.Views[0]
	for _, tc := range []struct {
		name  string
		store string
		ok    bool
	}{
		{topic.Changelog("app", "nexmark-q7", 1, "top"), "top", true},
		{topic.Changelog("app", "nexmark-q7", 1, "meta-1"), "meta-1", true},
		{topic.Changelog("app", "nexmark-q7", 2, "top"), "", false},
		{topic.Changelog("app", "nexmark-q5", 1, "top"), "", false},
		{topic.Repartition("app", "nexmark-q7", 1, "by-window"), "", false},
		{topic.DLQ("app"), "", false},
		{"out", "", false},
	} {
		store, ok := changelogStore("app", v, tc.name)
		if ok != tc.ok || (ok && store != tc.store) {
			t.Errorf("changelogStore(%s) = %q, %v; want %q, %v", tc.name, store, ok, tc.store, tc.ok)
		}
	}
}

// The rankings bench/README.md defines, case by case; the Kafka tests use the same functions
// for their expectations, so they are pinned here.
func TestRankings(t *testing.T) {
	for _, tc := range []struct {
		a, b HotItem
		want bool
	}{
		{HotItem{Auction: 9, Count: 3}, HotItem{Auction: 1, Count: 2}, true},
		{HotItem{Auction: 1, Count: 2}, HotItem{Auction: 9, Count: 3}, false},
		{HotItem{Auction: 1, Count: 3}, HotItem{Auction: 9, Count: 3}, true},
		{HotItem{Auction: 9, Count: 3}, HotItem{Auction: 1, Count: 3}, false},
		{HotItem{Auction: 1, Count: 3}, HotItem{Auction: 1, Count: 3}, false},
	} {
		if got := Hotter(tc.a, tc.b); got != tc.want {
			t.Errorf("Hotter(%+v, %+v) = %v", tc.a, tc.b, got)
		}
	}
	base := HighestBid{Auction: 5, Bidder: 5, Price: 100, DateTime: 50}
	for _, tc := range []struct {
		a    HighestBid
		want bool
	}{
		{HighestBid{Auction: 9, Bidder: 9, Price: 101, DateTime: 99}, true},
		{HighestBid{Auction: 1, Bidder: 1, Price: 99, DateTime: 1}, false},
		{HighestBid{Auction: 9, Bidder: 9, Price: 100, DateTime: 49}, true},
		{HighestBid{Auction: 1, Bidder: 1, Price: 100, DateTime: 51}, false},
		{HighestBid{Auction: 4, Bidder: 9, Price: 100, DateTime: 50}, true},
		{HighestBid{Auction: 6, Bidder: 1, Price: 100, DateTime: 50}, false},
		{HighestBid{Auction: 5, Bidder: 4, Price: 100, DateTime: 50}, true},
		{base, false},
	} {
		if got := Higher(tc.a, base); got != tc.want {
			t.Errorf("Higher(%+v, %+v) = %v", tc.a, base, got)
		}
	}
	if k := PairKey(nexmark.Bid{Auction: 1003, Bidder: 1001}); k != "1001/1003" {
		t.Errorf("PairKey = %q, want bidder/auction", k)
	}
}
