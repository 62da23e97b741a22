package views_test

import (
	"fmt"
	"time"

	"github.com/tarnhq/tarn/views"
)

type Trade struct {
	Symbol string  `json:"symbol"`
	Price  float64 `json:"price"`
	Qty    int     `json:"qty"`
}

// A view reads as a pipeline: a source, operators named by their step, a sink.
func ExampleDefine() {
	v, err := views.Define("price-range", func(b *views.Builder) {
		trades := views.Source(b, "trades", views.JSON[Trade]())
		bySymbol := views.GroupBy(trades, "by-symbol", func(_ string, t Trade) string { return t.Symbol })
		views.Aggregate(bySymbol, "range", views.MinMaxOf(func(t Trade) float64 { return t.Price })).Serve()
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, line := range v.Graph() {
		fmt.Println(line)
	}
	// Output:
	// source source-trades topic:trades codec=json:github.com/tarnhq/tarn/views_test.Trade time=record
	// selectkey by-symbol
	// repartition by-symbol codec=json:github.com/tarnhq/tarn/views_test.Trade
	// aggregate range agg=minmax github.com/tarnhq/tarn/views_test.Trade->github.com/tarnhq/tarn/views.MinMax[float64]
	// serve range
	// view price-range v1
}

// Windows need an explicit grace period; Define names the view and step of each problem.
func ExampleWindowBy() {
	_, err := views.Define("volume", func(b *views.Builder) {
		trades := views.Source(b, "trades", views.JSON[Trade]())
		w := views.WindowBy(views.GroupByKey(trades), views.Tumbling(time.Minute))
		views.CountWindows(w, "per-minute").Serve()
	})
	fmt.Println(err)
	// Output:
	// views: bad definition: view "volume" step "per-minute": tumbling window has no grace period; call Grace(d) (0 is allowed)
}

// Filter and map to an output topic: single-event processing, no state.
func ExampleMap() {
	type Big struct {
		Symbol   string  `json:"symbol"`
		Notional float64 `json:"notional"`
	}
	v, err := views.Define("big-trades", func(b *views.Builder) {
		trades := views.Source(b, "trades", views.JSON[Trade]())
		big := trades.Filter("big", func(_ string, t Trade) bool { return t.Qty >= 100 })
		views.Map(big, "notional", func(_ string, t Trade) Big {
			return Big{Symbol: t.Symbol, Notional: t.Price * float64(t.Qty)}
		}).To("big-trades", views.JSON[Big]())
	})
	fmt.Println(v.Name(), v.Queryable(), err)
	// Output:
	// big-trades false <nil>
}
