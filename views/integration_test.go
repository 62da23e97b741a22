package views

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/tarnhq/tarn/cdc"
	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Single-event processing: filter and map to an output topic.
func TestKafkaFilterMapToTopic(t *testing.T) {
	k := newKafkaEnv(t)
	in := k.topic("trades", 3)
	out := k.app + "-big"
	v, err := Define("big", func(b *Builder) {
		trades := Source(b, in, JSON[trade]())
		big := trades.Filter("big", func(_ string, t trade) bool { return t.Qty >= 100 })
		Map(big, "notional", func(_ string, t trade) notional {
			return notional{Symbol: t.Symbol, Notional: t.Price * float64(t.Qty)}
		}).To(out, JSON[notional]())
	})
	must(t, err)
	want := map[string]notional{}
	var recs []*kgo.Record
	for i := range 600 {
		tr := trade{Symbol: fmt.Sprintf("S%d", i%7), Price: float64(i % 13), Qty: i % 250}
		key := fmt.Sprintf("t%d", i)
		if tr.Qty >= 100 {
			want[key] = notional{Symbol: tr.Symbol, Notional: tr.Price * float64(tr.Qty)}
		}
		recs = append(recs, jsonRecord(in, key, int64(i), tr))
	}
	k.produce(recs...)
	k.runtime(Config{Views: []*View{v}})
	got := map[string]notional{}
	for _, r := range k.readAll(out, len(want)) {
		var n notional
		must(t, json.Unmarshal(r.Value, &n))
		got[string(r.Key)] = n
	}
	if !maps.Equal(got, want) {
		t.Errorf("output has %d records, want %d; first differences: %v", len(got), len(want), diff(got, want))
	}
}

func diff[K, V comparable](got, want map[K]V) []string {
	var d []string
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			d = append(d, fmt.Sprintf("%v: got %v want %v", k, g, w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("%v: unexpected", k))
		}
	}
	sort.Strings(d)
	return d[:min(len(d), 5)]
}

// Local-state aggregation: min and max price per symbol, repartitioned from trade ids.
func TestKafkaMinMaxPerSymbol(t *testing.T) {
	k := newKafkaEnv(t)
	in := k.topic("trades", 3)
	v, err := Define("range", func(b *Builder) {
		g := GroupBy(Source(b, in, JSON[trade]()), "by-symbol", bySymbol)
		Aggregate(g, "range", MinMaxOf(func(t trade) float64 { return t.Price })).Serve()
	})
	must(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[string]MinMax[float64]{}
	var recs []*kgo.Record
	for i := range 2000 {
		tr := trade{Symbol: fmt.Sprintf("S%d", rng.IntN(20)), Price: float64(rng.IntN(10000)) / 100, Qty: 1}
		m, ok := want[tr.Symbol]
		if !ok {
			m = MinMax[float64]{Min: tr.Price, Max: tr.Price}
		}
		m.Min, m.Max, m.Count = min(m.Min, tr.Price), max(m.Max, tr.Price), m.Count+1
		want[tr.Symbol] = m
		recs = append(recs, jsonRecord(in, fmt.Sprintf("t%d", i), int64(i), tr))
	}
	k.produce(recs...)
	rt := k.runtime(Config{Views: []*View{v}})
	eventually(t, func() error {
		got := map[string]MinMax[float64]{}
		for sym := range want {
			raw, _, err := rt.Get(context.Background(), "range", sym)
			if err != nil {
				return err
			}
			var m MinMax[float64]
			must(t, json.Unmarshal(raw, &m))
			got[sym] = m
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("view differs: %v", diff(got, want))
		}
		return nil
	})
}

// Multiphase repartitioning: the top 10 trades by quantity per 10 s window over all
// partitions.
func TestKafkaTopTradesPerWindow(t *testing.T) {
	k := newKafkaEnv(t)
	in := k.topic("trades", 3)
	better := func(a, b trade) bool { return a.Qty > b.Qty }
	v, err := Define("top", func(b *Builder) {
		all := GroupBy(Source(b, in, JSON[trade]()), "all", func(string, trade) string { return "all" })
		w := WindowBy(all, Tumbling(10*time.Second).Grace(time.Hour))
		AggregateWindows(w, "top10", TopN(10, better)).Serve()
	})
	must(t, err)
	byWindow := map[int64][]trade{}
	var recs []*kgo.Record
	for i := range 1000 {
		tr := trade{Symbol: fmt.Sprintf("S%d", i), Qty: (i * 7919) % 1000, Price: 1}
		ts := int64(i) * 97
		byWindow[ts/10000*10000] = append(byWindow[ts/10000*10000], tr)
		recs = append(recs, jsonRecord(in, tr.Symbol, ts, tr))
	}
	k.produce(recs...)
	want := map[int64]string{}
	for start, ts := range byWindow {
		slices.SortStableFunc(ts, func(a, b trade) int { return b.Qty - a.Qty })
		raw, _ := json.Marshal(ts[:min(10, len(ts))])
		want[start] = string(raw)
	}
	rt := k.runtime(Config{Views: []*View{v}})
	eventually(t, func() error {
		ws, _, err := rt.Windows(context.Background(), "top", "all", time.UnixMilli(0), time.UnixMilli(1<<40))
		if err != nil {
			return err
		}
		got := map[int64]string{}
		for _, w := range ws {
			got[w.Start.UnixMilli()] = string(w.Value)
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("windows differ: %v", diff(got, want))
		}
		return nil
	})
}

// Windowed aggregation with late events: out-of-order records inside grace update their
// window; records beyond it go to the dead-letter topic with reason headers.
func TestKafkaWindowedLateEvents(t *testing.T) {
	k := newKafkaEnv(t)
	in := k.topic("clicks", 1)
	v, err := Define("clicks", func(b *Builder) {
		w := WindowBy(GroupByKey(Source(b, in, JSON[trade]())), Tumbling(10*time.Second).Grace(5*time.Second))
		CountWindows(w, "per-10s").Serve()
	})
	must(t, err)
	// Event times in seconds, in arrival order. The watermark is the largest time so far.
	times := []int64{1, 3, 12, 8, 14, 4, 21, 16, 2, 25}
	want, late := map[int64]int64{}, 0
	wm := int64(0)
	var recs []*kgo.Record
	for i, s := range times {
		wm = max(wm, s)
		start := s / 10 * 10
		if start+10+5 <= wm {
			late++
		} else {
			want[start*1000]++
		}
		recs = append(recs, jsonRecord(in, "page", s*1000, trade{Symbol: "page", Qty: i}))
	}
	k.produce(recs...)
	rt := k.runtime(Config{Views: []*View{v}})
	eventually(t, func() error {
		ws, _, err := rt.Windows(context.Background(), "clicks", "page", time.UnixMilli(0), time.UnixMilli(1<<40))
		if err != nil {
			return err
		}
		got := map[int64]int64{}
		for _, w := range ws {
			var n int64
			must(t, json.Unmarshal(w.Value, &n))
			got[w.Start.UnixMilli()] = n
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("windows differ: %v", diff(got, want))
		}
		return nil
	})
	dead := k.readAll(k.app+".dlq", int(late))
	for _, r := range dead {
		h := headers(r)
		if h["tarn.reason"] != "late" || h["tarn.topic"] != in || h["tarn.offset"] == "" || h["tarn.watermark"] == "" {
			t.Errorf("dead letter headers %v", h)
		}
	}
	if len(dead) != int(late) {
		t.Errorf("%d dead letters, want %d", len(dead), late)
	}
}

func headers(r *kgo.Record) map[string]string {
	h := map[string]string{}
	for _, x := range r.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}

// A view fed by a CDC table topic: order amounts averaged per region, with updates that move
// orders between regions, deletes and a truncate marker, as the cdc package writes them.
func TestKafkaCDCTableView(t *testing.T) {
	k := newKafkaEnv(t)
	orders := topic.CDCTable(k.app, "public", "orders")
	k.create(orders, 2)
	v, err := Define("regions", func(b *Builder) {
		g := GroupTable(CDCTable[order](b, "public", "orders"), "by-region", func(_ string, o order) string { return o.Region })
		AggregateTable(g, "amount", SumOf(func(o order) float64 { return o.Amount })).Serve()
	})
	must(t, err)
	rows := map[string]order{}
	var recs []*kgo.Record
	put := func(o order) {
		rows[strconv.Itoa(o.ID)] = o
		recs = append(recs, jsonRecord(orders, strconv.Itoa(o.ID), 1, o))
	}
	regions := []string{"eu", "us", "apac"}
	for i := range 300 {
		put(order{ID: i, Region: regions[i%3], Amount: float64(i)})
	}
	for i := 0; i < 300; i += 7 {
		put(order{ID: i, Region: regions[(i+1)%3], Amount: float64(2 * i)})
	}
	for i := 0; i < 300; i += 11 {
		delete(rows, strconv.Itoa(i))
		recs = append(recs, &kgo.Record{Topic: orders, Key: []byte(strconv.Itoa(i)), Partition: -1})
	}
	// Truncate partition 0 (the cdc source sends the marker to every partition of a table;
	// one partition shows that it clears exactly what that partition holds).
	recs = append(recs, &kgo.Record{Topic: orders, Key: cdc.TruncateKey, Partition: 0,
		Headers: []kgo.RecordHeader{{Key: cdc.HeaderOp, Value: []byte(cdc.OpTruncate)}}})
	for key := range rows {
		if partition.For([]byte(key), 2) == 0 {
			delete(rows, key)
		}
	}
	put(order{ID: 1000, Region: "eu", Amount: 5})
	k.produce(recs...)
	want := map[string]float64{"eu": 0, "us": 0, "apac": 0}
	for _, o := range rows {
		want[o.Region] += o.Amount
	}
	rt := k.runtime(Config{Views: []*View{v}})
	eventually(t, func() error {
		got := map[string]float64{}
		for region := range want {
			raw, _, err := rt.Get(context.Background(), "regions", region)
			if err != nil {
				return err
			}
			var s float64
			must(t, json.Unmarshal(raw, &s))
			got[region] = s
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("view differs: %v", diff(got, want))
		}
		return nil
	})
}
