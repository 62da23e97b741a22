package tarnq

import (
	"strconv"
	"time"

	"github.com/tarnhq/tarn/bench/nexmark"
	"github.com/tarnhq/tarn/state"
	"github.com/tarnhq/tarn/views"
)

// best folds values into the best one so far, where better(a, b) says a ranks above b; a
// value that ranks no higher than the best keeps the best (Kafka Streams' reduce(old, new)
// keeps old on ties in the same way).
func best[V any](name string, better func(a, b V) bool) views.Aggregator[V, *V] {
	return views.Aggregator[V, *V]{
		Name: name,
		Init: func() *V { return nil },
		Add: func(acc *V, v V) *V {
			if acc == nil || better(v, *acc) {
				return &v
			}
			return acc
		},
	}
}

func windowKey(start int64) string { return strconv.FormatInt(start, 10) }

// HotItem is q5's output: the auction with the most bids in one hopping window.
type HotItem struct {
	WindowStart int64 `json:"windowStart"`
	WindowEnd   int64 `json:"windowEnd"`
	Auction     int64 `json:"auction"`
	Count       int64 `json:"count"`
}

// Hotter reports whether a has more bids than b, or as many and a smaller auction id.
func Hotter(a, b HotItem) bool {
	if a.Count != b.Count {
		return a.Count > b.Count
	}
	return a.Auction < b.Auction
}

const (
	q5Size    = 10 * time.Second
	q5Advance = 2 * time.Second
)

// q5 counts bids per auction in hopping windows, continues with the count updates, re-keys
// them by window and keeps the hottest auction of each window: the peer's plan. Counts only
// grow, so the best of all updates of a window is its final best.
func q5(t nexmark.Topics, output string) (*Plan, error) {
	p, err := single(t, "nexmark-q5", func(b *views.Builder) {
		w := views.WindowBy(views.GroupByKey(bidSource(b, t)), views.Hopping(q5Size, q5Advance).Grace(grace))
		updates := views.CountWindows(w, "counts").ToStream()
		items := views.Map(updates, "hot-item", func(key string, r views.WindowRecord[int64]) HotItem {
			auction, _ := strconv.ParseInt(key, 10, 64) // bids are keyed by their auction id
			return HotItem{WindowStart: r.Start.UnixMilli(), WindowEnd: r.End.UnixMilli(), Auction: auction, Count: *r.Value}
		})
		byWindow := views.GroupBy(items, "by-window", func(_ string, h HotItem) string { return windowKey(h.WindowStart) })
		views.Aggregate(byWindow, "top", best("hotter", Hotter)).To(output, views.JSON[*HotItem]())
	}, "by-window")
	if err != nil {
		return nil, err
	}
	p.windowed("nexmark-q5", "counts", state.WindowOptions{Size: q5Size, Grace: grace, Retention: views.DefaultRetention})
	return p, nil
}

// HighestBid is q7's output: the highest bid of one tumbling window.
type HighestBid struct {
	WindowStart int64 `json:"windowStart"`
	WindowEnd   int64 `json:"windowEnd"`
	Auction     int64 `json:"auction"`
	Bidder      int64 `json:"bidder"`
	Price       int64 `json:"price"`
	DateTime    int64 `json:"dateTime"`
}

// Higher reports whether a ranks above b: higher price, then earlier, then smaller auction
// id, then smaller bidder id.
func Higher(a, b HighestBid) bool {
	switch {
	case a.Price != b.Price:
		return a.Price > b.Price
	case a.DateTime != b.DateTime:
		return a.DateTime < b.DateTime
	case a.Auction != b.Auction:
		return a.Auction < b.Auction
	}
	return a.Bidder < b.Bidder
}

const q7Window = 10 * time.Second

// q7 re-keys every bid by its tumbling window and keeps each window's highest bid, as the
// Kafka Streams peer does (map, repartition, reduce).
func q7(t nexmark.Topics, output string) (*Plan, error) {
	size := q7Window.Milliseconds()
	return single(t, "nexmark-q7", func(b *views.Builder) {
		hb := views.Map(bidSource(b, t), "highest", func(_ string, x nexmark.Bid) HighestBid {
			start := floorDiv(x.DateTime, size) * size
			return HighestBid{WindowStart: start, WindowEnd: start + size, Auction: x.Auction, Bidder: x.Bidder,
				Price: x.Price, DateTime: x.DateTime}
		})
		byWindow := views.GroupBy(hb, "by-window", func(_ string, h HighestBid) string { return windowKey(h.WindowStart) })
		views.Aggregate(byWindow, "top", best("higher", Higher)).To(output, views.JSON[*HighestBid]())
	}, "by-window")
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// PriceAgg is q17's accumulator of one auction's bids in one day.
type PriceAgg struct {
	Auction int64 `json:"auction"`
	Count   int64 `json:"count"`
	Min     int64 `json:"min"`
	Max     int64 `json:"max"`
	Sum     int64 `json:"sum"`
}

// DayStats is q17's output.
type DayStats struct {
	Auction int64   `json:"auction"`
	Day     string  `json:"day"`
	Count   int64   `json:"count"`
	Min     int64   `json:"min"`
	Max     int64   `json:"max"`
	Sum     int64   `json:"sum"`
	Avg     float64 `json:"avg"`
}

const q17Day = 24 * time.Hour

// q17 aggregates each auction's bids per UTC day in tumbling windows (bids are already keyed
// by auction, so nothing is repartitioned) and turns each window update into the output
// record keyed "<auction>/<day>".
func q17(t nexmark.Topics, output string) (*Plan, error) {
	p, err := single(t, "nexmark-q17", func(b *views.Builder) {
		w := views.WindowBy(views.GroupByKey(bidSource(b, t)), views.Tumbling(q17Day).Grace(grace))
		days := views.AggregateWindows(w, "days", views.Aggregator[nexmark.Bid, PriceAgg]{
			Name: "price-stats",
			Init: func() PriceAgg { return PriceAgg{} },
			Add: func(a PriceAgg, x nexmark.Bid) PriceAgg {
				if a.Count == 0 {
					a.Min, a.Max = x.Price, x.Price
				}
				return PriceAgg{Auction: x.Auction, Count: a.Count + 1, Min: min(a.Min, x.Price), Max: max(a.Max, x.Price), Sum: a.Sum + x.Price}
			},
		})
		out := views.Map(days.ToStream(), "day-stats", func(_ string, r views.WindowRecord[PriceAgg]) DayStats {
			a := r.Value
			return DayStats{Auction: a.Auction, Day: r.Start.UTC().Format(time.DateOnly), Count: a.Count,
				Min: a.Min, Max: a.Max, Sum: a.Sum, Avg: float64(a.Sum) / float64(a.Count)}
		})
		views.SelectKey(out, "by-day", func(_ string, d DayStats) string {
			return strconv.FormatInt(d.Auction, 10) + "/" + d.Day
		}).To(output, views.JSON[DayStats]())
	})
	if err != nil {
		return nil, err
	}
	p.windowed("nexmark-q17", "days", state.WindowOptions{Size: q17Day, Grace: grace, Retention: views.DefaultRetention})
	return p, nil
}

// q18 keeps the last bid of each (bidder, auction): the bid with the greatest dateTime, ties
// to the later one read. The pair key is not the input's key, so views repartitions by it.
func q18(t nexmark.Topics, output string) (*Plan, error) {
	return single(t, "nexmark-q18", func(b *views.Builder) {
		byPair := views.GroupBy(bidSource(b, t), "by-pair", func(_ string, x nexmark.Bid) string { return PairKey(x) })
		views.Aggregate(byPair, "last", views.Aggregator[nexmark.Bid, *nexmark.Bid]{
			Name: "latest",
			Init: func() *nexmark.Bid { return nil },
			Add: func(acc *nexmark.Bid, x nexmark.Bid) *nexmark.Bid {
				if acc == nil || x.DateTime >= acc.DateTime {
					return &x
				}
				return acc
			},
		}).To(output, views.JSON[*nexmark.Bid]())
	}, "by-pair")
}

// PairKey is q18's output key of a bid: "<bidder>/<auction>".
func PairKey(x nexmark.Bid) string {
	return strconv.FormatInt(x.Bidder, 10) + "/" + strconv.FormatInt(x.Auction, 10)
}
