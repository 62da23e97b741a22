package views

import (
	"bufio"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tarnhq/tarn/cdc"
	"github.com/twmb/franz-go/pkg/kgo"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/semantics")

type trade struct {
	Symbol string  `json:"symbol"`
	Price  float64 `json:"price"`
	Qty    int     `json:"qty"`
	At     int64   `json:"at,omitempty"` // event time in Unix ms, for views that read it
}

type order struct {
	ID     int     `json:"id"`
	Region string  `json:"region"`
	Amount float64 `json:"amount"`
}

type notional struct {
	Symbol   string  `json:"symbol"`
	Notional float64 `json:"notional"`
}

func bySymbol(_ string, t trade) string { return t.Symbol }

// semanticViews are the views the files in testdata/semantics run, by name.
var semanticViews = map[string]func(b *Builder){
	"filtermap": func(b *Builder) {
		trades := Source(b, "trades", JSON[trade]())
		big := trades.Filter("big", func(_ string, t trade) bool { return t.Qty >= 100 })
		Map(big, "notional", func(_ string, t trade) notional {
			return notional{Symbol: t.Symbol, Notional: t.Price * float64(t.Qty)}
		}).To("big-trades", JSON[notional]())
	},
	"minmax": func(b *Builder) {
		trades := Source(b, "trades", JSON[trade]())
		g := GroupBy(trades, "by-symbol", bySymbol)
		Aggregate(g, "range", MinMaxOf(func(t trade) float64 { return t.Price })).Serve()
	},
	"top": func(b *Builder) {
		trades := Source(b, "trades", JSON[trade]())
		all := GroupBy(trades, "all", func(string, trade) string { return "all" })
		w := WindowBy(all, Tumbling(10*time.Second).Grace(5*time.Second))
		AggregateWindows(w, "top3", TopN(3, func(a, b trade) bool { return a.Qty > b.Qty })).Serve()
	},
	"tumbling": func(b *Builder) {
		trades := Source(b, "trades", JSON[trade](), EventTime(func(t trade) time.Time { return time.UnixMilli(t.At) }))
		w := WindowBy(GroupByKey(trades), Tumbling(10*time.Second).Grace(2*time.Second))
		CountWindows(w, "counts").Serve()
	},
	"hopping": func(b *Builder) {
		trades := Source(b, "trades", JSON[trade]())
		w := WindowBy(GroupByKey(trades), Hopping(10*time.Second, 5*time.Second).Grace(0))
		AggregateWindows(w, "qty", SumOf(func(t trade) float64 { return float64(t.Qty) })).Serve()
	},
	"tostream": func(b *Builder) {
		trades := Source(b, "trades", JSON[trade](), EventTime(func(t trade) time.Time { return time.UnixMilli(t.At) }))
		w := WindowBy(GroupByKey(trades), Tumbling(10*time.Second).Grace(5*time.Second))
		updates := CountWindows(w, "counts").ToStream()
		counts := Map(updates, "count", func(_ string, r WindowRecord[int64]) int64 { return *r.Value })
		Map(counts, "window-count", func(k string, n int64) string { return k + "=" + strconv.FormatInt(n, 10) }).
			To("window-counts", JSON[string]())
		// The largest window count of each key: aggregated in the windows' own task, fed by
		// their flush.
		Aggregate(GroupByKey(counts), "largest", MaxOf(func(n int64) int64 { return n })).Serve()
	},
	"session": func(b *Builder) {
		trades := Source(b, "trades", JSON[trade]())
		w := WindowBy(GroupByKey(trades), Session(5*time.Second).Grace(10*time.Second))
		CountWindows(w, "sessions").Serve()
	},
	"sliding": func(b *Builder) {
		trades := Source(b, "trades", JSON[trade]())
		w := WindowBy(GroupByKey(trades), Sliding(10*time.Second).Grace(5*time.Second))
		AggregateWindows(w, "qty", SumOf(func(t trade) float64 { return float64(t.Qty) })).Serve()
	},
	"orders": func(b *Builder) {
		CDCTable[order](b, "public", "orders").Serve()
	},
	"regions": func(b *Builder) {
		orders := CDCTable[order](b, "public", "orders")
		g := GroupTable(orders, "by-region", func(_ string, o order) string { return o.Region })
		sums := AggregateTable(g, "amount", AvgOf(func(o order) float64 { return o.Amount }))
		sums.Serve()
		sums.To("region-amounts", JSON[Avg]())
	},
}

func TestSemantics(t *testing.T) {
	files, err := filepath.Glob("testdata/semantics/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no semantics files: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runSemantics(t, f) })
	}
}

// runSemantics runs one file: commands up to "----", the expected dump after it.
func runSemantics(t *testing.T, path string) {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	script, want, _ := strings.Cut(string(raw), "----\n")
	var d *driver
	sc := bufio.NewScanner(strings.NewReader(script))
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if err := d.command(f, &d); err != nil {
			t.Fatalf("%s:%d: %v", path, line, err)
		}
	}
	if d == nil {
		t.Fatalf("%s: no view command", path)
	}
	if err := d.flush(); err != nil {
		t.Fatal(err)
	}
	got := d.dump()
	if *rewrite {
		if err := os.WriteFile(path, []byte(script+"----\n"+got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got != want {
		t.Errorf("%s: got\n%s\nwant\n%s", path, got, want)
	}
}

// command runs one script line:
//
//	view <name> [parts]            start the named view of semanticViews
//	in <topic> <key> <ms> <value>  feed a record (value "null" is a tombstone) [p=N] [op=truncate]
//	clock <ms>                     set the wall clock
//	flush                          end a batch
func (d *driver) command(f []string, dp **driver) error {
	switch f[0] {
	case "view":
		parts := int32(1)
		if len(f) > 2 {
			n, _ := strconv.Atoi(f[2])
			parts = int32(n)
		}
		v, err := Define(f[1], semanticViews[f[1]])
		if err != nil {
			return err
		}
		*dp = newDriver(v, parts)
		return nil
	case "in":
		ms, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return err
		}
		r := &kgo.Record{Topic: f[1], Key: []byte(f[2]), Timestamp: time.UnixMilli(ms), Partition: -1}
		if f[4] != "null" {
			r.Value = []byte(f[4])
		}
		for _, opt := range f[5:] {
			k, v, _ := strings.Cut(opt, "=")
			switch k {
			case "p":
				n, _ := strconv.Atoi(v)
				r.Partition = int32(n)
			case "op":
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: cdc.HeaderOp, Value: []byte(v)})
				r.Key = cdc.TruncateKey
			}
		}
		return d.input(r)
	case "clock":
		ms, err := strconv.ParseInt(f[1], 10, 64)
		d.now = time.UnixMilli(ms)
		return err
	case "flush":
		return d.flush()
	}
	return strconv.ErrSyntax
}
