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

// AuctionPrice is q2's output.
type AuctionPrice struct {
	Auction int64 `json:"auction"`
	Price   int64 `json:"price"`
}

// Inputs returns the input topics query reads.
func Inputs(query string, t nexmark.Topics) ([]string, error) {
	switch query {
	case "q0", "q1", "q2":
		return []string{t.Bid}, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrNotImplemented, query)
}

func eventTime(b nexmark.Bid) time.Time { return time.UnixMilli(b.DateTime) }

// Define returns the view of query, reading t and writing output.
func Define(query string, t nexmark.Topics, output string) (*views.View, error) {
	var build func(b *views.Builder)
	switch query {
	case "q0":
		build = func(b *views.Builder) {
			views.Source(b, t.Bid, views.JSON[nexmark.Bid](), views.EventTime(eventTime)).To(output, views.JSON[nexmark.Bid]())
		}
	case "q1":
		build = func(b *views.Builder) {
			bids := views.Source(b, t.Bid, views.JSON[nexmark.Bid](), views.EventTime(eventTime))
			views.Map(bids, "euro", func(_ string, x nexmark.Bid) EuroBid {
				return EuroBid{Auction: x.Auction, Bidder: x.Bidder, Price: float64(x.Price) * 0.908,
					Channel: x.Channel, URL: x.URL, DateTime: x.DateTime, Extra: x.Extra}
			}).To(output, views.JSON[EuroBid]())
		}
	case "q2":
		build = func(b *views.Builder) {
			bids := views.Source(b, t.Bid, views.JSON[nexmark.Bid](), views.EventTime(eventTime))
			kept := bids.Filter("auction-123", func(_ string, x nexmark.Bid) bool { return x.Auction%123 == 0 })
			views.Map(kept, "auction-price", func(_ string, x nexmark.Bid) AuctionPrice {
				return AuctionPrice{Auction: x.Auction, Price: x.Price}
			}).To(output, views.JSON[AuctionPrice]())
		}
	default:
		return nil, fmt.Errorf("%w: %s", ErrNotImplemented, query)
	}
	return views.Define("nexmark-"+query, build)
}
