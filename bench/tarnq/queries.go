package tarnq

import (
	"errors"
	"fmt"
	"time"

	"github.com/tarnhq/tarn/bench/nexmark"
	"github.com/tarnhq/tarn/views"
)

// ErrNotImplemented is returned by [Define] for a query tarnq does not have yet; use errors.Is.
var ErrNotImplemented = errors.New("tarnq: query not implemented")

// grace is the grace period of every window, as bench/README.md fixes it.
const grace = 5 * time.Second

// Define returns the plan of query, reading t and writing output.
func Define(query string, t nexmark.Topics, output string) (*Plan, error) {
	define := map[string]func(nexmark.Topics, string) (*Plan, error){
		"q0": q0, "q1": q1, "q2": q2, "q3": q3, "q5": q5, "q7": q7, "q8": q8, "q17": q17, "q18": q18, "q20": q20,
	}[query]
	if define == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotImplemented, query)
	}
	p, err := define(t, output)
	if err != nil {
		return nil, fmt.Errorf("tarnq: %s: %w", query, err)
	}
	p.Query, p.Output = query, output
	return p, nil
}

func eventTime(b nexmark.Bid) time.Time { return time.UnixMilli(b.DateTime) }

func bidSource(b *views.Builder, t nexmark.Topics) *views.Stream[nexmark.Bid] {
	return views.Source(b, t.Bid, views.JSON[nexmark.Bid](), views.EventTime(eventTime))
}

// single is the plan of a query that is one view reading bids (and its own repartition
// topics, named by their steps).
func single(t nexmark.Topics, view string, build func(b *views.Builder), repartitions ...string) (*Plan, error) {
	v, err := views.Define(view, build)
	if err != nil {
		return nil, err
	}
	p := &Plan{Inputs: []string{t.Bid}}
	srcs := []source{{name: t.Bid}}
	for _, step := range repartitions {
		srcs = append(srcs, source{repartition: step})
	}
	p.add(v, srcs...)
	return p, nil
}

func q0(t nexmark.Topics, output string) (*Plan, error) {
	return single(t, "nexmark-q0", func(b *views.Builder) {
		bidSource(b, t).To(output, views.JSON[nexmark.Bid]())
	})
}

// EuroBid is q1's output: a bid with its price in euros.
type EuroBid struct {
	Auction  int64   `json:"auction"`
	Bidder   int64   `json:"bidder"`
	Price    float64 `json:"price"`
	Channel  string  `json:"channel"`
	URL      string  `json:"url"`
	DateTime int64   `json:"dateTime"`
	Extra    string  `json:"extra"`
}

func q1(t nexmark.Topics, output string) (*Plan, error) {
	return single(t, "nexmark-q1", func(b *views.Builder) {
		views.Map(bidSource(b, t), "euro", func(_ string, x nexmark.Bid) EuroBid {
			return EuroBid{Auction: x.Auction, Bidder: x.Bidder, Price: float64(x.Price) * 0.908,
				Channel: x.Channel, URL: x.URL, DateTime: x.DateTime, Extra: x.Extra}
		}).To(output, views.JSON[EuroBid]())
	})
}

// AuctionPrice is q2's output.
type AuctionPrice struct {
	Auction int64 `json:"auction"`
	Price   int64 `json:"price"`
}

func q2(t nexmark.Topics, output string) (*Plan, error) {
	return single(t, "nexmark-q2", func(b *views.Builder) {
		kept := bidSource(b, t).Filter("auction-123", func(_ string, x nexmark.Bid) bool { return x.Auction%123 == 0 })
		views.Map(kept, "auction-price", func(_ string, x nexmark.Bid) AuctionPrice {
			return AuctionPrice{Auction: x.Auction, Price: x.Price}
		}).To(output, views.JSON[AuctionPrice]())
	})
}
