package views

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkKafka measures records/s of a windowed count per key (Nexmark q5-like) and a
// filter/map to a topic (q1/q2-like) on the real broker, at-least-once and exactly-once, one
// instance. Each run processes a pre-produced topic of 200k records of ~60 B; the figure is
// taken from the first committed offset to the last, so start-up is not in it. Run with
//
//	go test -run '^$' -bench Kafka -benchtime 1x ./views/
func BenchmarkKafka(b *testing.B) {
	views := map[string]func(in, out string) func(*Builder){
		"windowed-count": func(in, _ string) func(*Builder) {
			return func(bl *Builder) {
				w := WindowBy(GroupByKey(Source(bl, in, JSON[trade]())), Tumbling(10*time.Second).Grace(time.Minute))
				CountWindows(w, "counts").Serve()
			}
		},
		"filter-map": func(in, out string) func(*Builder) {
			return func(bl *Builder) {
				big := Source(bl, in, JSON[trade]()).Filter("big", func(_ string, t trade) bool { return t.Qty%2 == 0 })
				Map(big, "notional", func(_ string, t trade) notional {
					return notional{Symbol: t.Symbol, Notional: t.Price * float64(t.Qty)}
				}).To(out, JSON[notional]())
			}
		},
	}
	for _, name := range []string{"windowed-count", "filter-map"} {
		for _, eos := range []bool{false, true} {
			b.Run(name+"/"+map[bool]string{false: "alo", true: "eos"}[eos], func(b *testing.B) {
				for range b.N {
					benchOnce(b, views[name], eos)
				}
			})
		}
	}
}

func benchOnce(b *testing.B, build func(in, out string) func(*Builder), eos bool) {
	k := newKafkaEnv(b)
	const n = 200_000
	in := k.topic("bids", 4)
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, jsonRecord(in, "auction"+strconv.Itoa(i%1000), int64(i), trade{Symbol: "A", Price: 1.5, Qty: i}))
	}
	k.produce(recs...)
	v, err := Define("bench", build(in, k.app+"-out"))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	k.runtime(Config{Views: []*View{v}, ExactlyOnce: eos})
	group := k.app + ".bench.v1"
	var first time.Time
	for {
		c := committed(k.adm, group, in)
		if c > 0 && first.IsZero() {
			first = time.Now()
		}
		if c >= n {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	el := time.Since(first)
	b.StopTimer()
	b.ReportMetric(float64(n)/el.Seconds(), "records/s")
}
