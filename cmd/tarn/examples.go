package main

import (
	"errors"
	"strconv"
	"time"

	"github.com/tarnhq/tarn/enrich"
	"github.com/tarnhq/tarn/views"
)

// Trade is one execution on the trades topic, keyed by trade id.
type Trade struct {
	ID     string    `json:"id"`
	Symbol string    `json:"symbol"`
	Price  float64   `json:"price"`
	Qty    int       `json:"qty"`
	Time   time.Time `json:"time"`
}

// Order is a row of the orders table, as CDC writes it to its table topic.
type Order struct {
	ID         int64   `json:"id"`
	CustomerID int64   `json:"customer_id"`
	Amount     float64 `json:"amount"`
	Status     string  `json:"status"`
}

// OrderStats is what orders-per-customer serves for each customer id.
type OrderStats struct {
	Orders int64   `json:"orders"`
	Total  float64 `json:"total"`
}

// User is a row of the users table, as CDC writes it to its table topic.
type User struct {
	ID      int64  `json:"id"`
	Name    string `json:"name"`
	Country string `json:"country"`
}

// Click is an ad click on the clicks topic, by a user.
type Click struct {
	ID     string    `json:"id"`
	UserID int64     `json:"user_id"`
	Ad     string    `json:"ad"`
	Time   time.Time `json:"time"`
}

// Impression is an ad shown, on the impressions topic keyed by impression id; AdClick is a click
// on one, on the ad-clicks topic keyed by the same id.
type Impression struct {
	Campaign string    `json:"campaign"`
	Time     time.Time `json:"time"`
}

type AdClick struct {
	Time time.Time `json:"time"`
}

// Attributed is an impression and, if it was clicked within the window, its click.
type Attributed struct {
	Impression *Impression `json:"impression"`
	Click      *AdClick    `json:"click"`
}

// Funnel is what campaign-funnel serves per campaign.
type Funnel struct {
	Impressions int64 `json:"impressions"`
	Clicks      int64 `json:"clicks"`
	Unshown     int64 `json:"clicks_without_impression"`
}

// The demo's event streams.
const (
	tradesTopic      = "trades"
	clicksTopic      = "clicks"
	impressionsTopic = "impressions"
	adClicksTopic    = "ad-clicks"
)

func exampleViews() ([]*views.View, error) {
	var errs []error
	define := func(name string, build func(b *views.Builder)) *views.View {
		v, err := views.Define(name, build)
		errs = append(errs, err)
		return v
	}
	vs := []*views.View{
		// Local-state aggregation: the lowest and highest price of each symbol.
		define("price-range", func(b *views.Builder) {
			trades := views.Source(b, tradesTopic, views.JSON[Trade](), views.EventTime(func(t Trade) time.Time { return t.Time }))
			bySymbol := views.GroupBy(trades, "by-symbol", func(_ string, t Trade) string { return t.Symbol })
			views.Aggregate(bySymbol, "range", views.MinMaxOf(func(t Trade) float64 { return t.Price })).Serve()
		}),
		// Multiphase repartitioning: the 10 largest trades of each minute over all partitions.
		define("top-trades", func(b *views.Builder) {
			trades := views.Source(b, tradesTopic, views.JSON[Trade](), views.EventTime(func(t Trade) time.Time { return t.Time }))
			all := views.GroupBy(trades, "all", func(string, Trade) string { return "all" })
			w := views.WindowBy(all, views.Tumbling(time.Minute).Grace(10*time.Second))
			views.AggregateWindows(w, "top10", views.TopN(10, func(a, b Trade) bool {
				return a.Price*float64(a.Qty) > b.Price*float64(b.Qty)
			})).Serve()
		}),
		// A view fed by Postgres: orders (a CDC table) aggregated per customer, updated in
		// place when an order changes or is deleted.
		define("orders-per-customer", func(b *views.Builder) {
			orders := views.CDCTable[Order](b, "public", "orders")
			byCustomer := views.GroupTable(orders, "by-customer", func(_ string, o Order) string { return itoa(o.CustomerID) })
			views.AggregateTable(byCustomer, "stats", views.Aggregator[Order, OrderStats]{
				Name:     "order-stats",
				Init:     func() OrderStats { return OrderStats{} },
				Add:      func(a OrderStats, o Order) OrderStats { return OrderStats{a.Orders + 1, a.Total + o.Amount} },
				Subtract: func(a OrderStats, o Order) OrderStats { return OrderStats{a.Orders - 1, a.Total - o.Amount} },
			}).Serve()
		}),
		// Enrichment with a CDC table: each click joined with its user's row as of the click
		// (left join: clicks of unknown users count under "unknown"), counted per country.
		define("clicks-by-country", func(b *views.Builder) {
			clicks := views.Source(b, clicksTopic, views.JSON[Click](), views.EventTime(func(c Click) time.Time { return c.Time }))
			withUser := enrich.JoinTable(clicks, "with-user", enrich.TableJoin[Click, User, string]{
				Table: enrich.CDCTable[User]("public", "users"),
				Key:   func(_ string, c Click) string { return strconv.FormatInt(c.UserID, 10) },
				Mode:  enrich.Left,
				Join: func(_ string, _ Click, u *User) string {
					if u == nil {
						return "unknown"
					}
					return u.Country
				},
			})
			views.Count(views.GroupBy(withUser, "by-country", func(_ string, country string) string { return country }), "clicks").Serve()
		}),
		// A windowed stream-stream join: impressions and the clicks on them (same key) within
		// a minute, in event time with 10 s grace, as a funnel per campaign.
		define("campaign-funnel", func(b *views.Builder) {
			joined := enrich.JoinWindows(b, "impression-clicks", enrich.WindowJoin[Impression, AdClick, Attributed]{
				Left:   views.FromTopic(impressionsTopic, views.JSON[Impression]()),
				Right:  views.FromTopic(adClicksTopic, views.JSON[AdClick]()),
				Before: 0, After: time.Minute, Grace: 10 * time.Second, Mode: enrich.Outer,
				Join: func(_ string, i *Impression, c *AdClick) Attributed { return Attributed{Impression: i, Click: c} },
			})
			byCampaign := views.GroupBy(joined, "by-campaign", func(_ string, a Attributed) string {
				if a.Impression == nil {
					return "unattributed"
				}
				return a.Impression.Campaign
			})
			views.Aggregate(byCampaign, "funnel", views.Aggregator[Attributed, Funnel]{
				Name: "funnel",
				Init: func() Funnel { return Funnel{} },
				Add: func(f Funnel, a Attributed) Funnel {
					switch {
					case a.Impression == nil:
						f.Unshown++
					case a.Click == nil:
						f.Impressions++
					default:
						f.Impressions++
						f.Clicks++
					}
					return f
				},
			}).Serve()
		}),
	}
	return vs, errors.Join(errs...)
}
