package main

import (
	"errors"
	"time"

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

// tradesTopic is the demo's event stream.
const tradesTopic = "trades"

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
	}
	return vs, errors.Join(errs...)
}
