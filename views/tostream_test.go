package views

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestToStreamFlushesInTheSameBatch checks that an aggregation fed by a windowed table's
// updates writes its store in the batch that made them: its cache first appears during the
// windowed table's flush, and a batch's store writes must all commit with the batch.
func TestToStreamFlushesInTheSameBatch(t *testing.T) {
	v, err := Define("tostream", func(b *Builder) {
		trades := Source(b, "trades", JSON[trade](), EventTime(func(t trade) time.Time { return time.UnixMilli(t.At) }))
		w := WindowBy(GroupByKey(trades), Tumbling(10*time.Second).Grace(5*time.Second))
		counts := Map(CountWindows(w, "counts").ToStream(), "count", func(_ string, r WindowRecord[int64]) int64 { return *r.Value })
		Aggregate(GroupByKey(counts), "largest", MaxOf(func(n int64) int64 { return n })).Serve()
	})
	if err != nil {
		t.Fatal(err)
	}
	d := newDriver(v, 1)
	for _, at := range []int64{1000, 2000} {
		r := &kgo.Record{Topic: "trades", Key: []byte("a"), Timestamp: time.UnixMilli(at), Partition: -1,
			Value: []byte(`{"symbol":"A","qty":1,"at":` + strconv.FormatInt(at, 10) + `}`)}
		if err := d.input(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.flush(); err != nil {
		t.Fatal(err)
	}
	got := d.kv[[2]int{v.served.index, 0}].m["a"]
	if string(got) != "2" {
		t.Fatalf("largest window count of a after one batch = %q, want 2", got)
	}
}
