package enrich_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tarnhq/tarn/enrich"
	"github.com/tarnhq/tarn/views"
	"github.com/twmb/franz-go/pkg/kgo"
)

type bid struct {
	Auction string  `json:"auction"`
	Price   float64 `json:"price"`
	Bidder  int     `json:"bidder"`
}

type auction struct {
	ID       string `json:"id"`
	Seller   int    `json:"seller"`
	Category int    `json:"category"`
}

type bidWithAuction struct {
	Bid      bid      `json:"bid"`
	Category int      `json:"category"`
	Auction  *auction `json:"-"`
}

// BenchmarkKafkaJoin measures records/s of a stream–table join (Nexmark q3-like: bids
// enriched with their auction from a co-partitioned table of 1000 auctions) and of a windowed
// stream–stream join (q8-like: new auctions joined with bids on them within 10 s), each over
// 200k pre-produced input records of ~60 B on 4 partitions, one instance, at-least-once, to
// an output topic. As in views' BenchmarkKafka (whose windowed-count is the reference), the
// figure runs from the first committed offset to the last. Run with
//
//	go test -run '^$' -bench KafkaJoin -benchtime 1x ./enrich/
func BenchmarkKafkaJoin(b *testing.B) {
	b.Run("stream-table", func(b *testing.B) {
		for range b.N {
			benchStreamTable(b)
		}
	})
	b.Run("windowed-join", func(b *testing.B) {
		for range b.N {
			benchWindowJoin(b)
		}
	})
}

const benchRecords = 200_000

func benchStreamTable(b *testing.B) {
	k := newKafkaEnv(b)
	auctions, bids := k.topic("auctions", 4), k.topic("bids", 4)
	var recs []*kgo.Record
	for i := range 1000 {
		a := auction{ID: "a" + strconv.Itoa(i), Seller: i % 97, Category: i % 10}
		recs = append(recs, jsonRecord(auctions, a.ID, time.UnixMilli(0), a))
	}
	base := time.Now().Add(-time.Hour)
	for i := range benchRecords {
		bd := bid{Auction: "a" + strconv.Itoa(i%1000), Price: 1.5, Bidder: i}
		recs = append(recs, jsonRecord(bids, bd.Auction, base.Add(time.Duration(i)*time.Millisecond), bd))
	}
	k.produce(recs...)
	v, err := views.Define("bench", func(bl *views.Builder) {
		s := views.Source(bl, bids, views.JSON[bid]())
		enrich.JoinTable(s, "with-auction", enrich.TableJoin[bid, auction, bidWithAuction]{
			Table: enrich.TopicTable(auctions, views.JSON[auction]()),
			Join:  func(_ string, b bid, a *auction) bidWithAuction { return bidWithAuction{Bid: b, Category: a.Category} },
		}).To(k.app+"-out", views.JSON[bidWithAuction]())
	})
	must(b, err)
	b.ResetTimer()
	k.runtime(v)
	b.ReportMetric(k.throughput(b, benchRecords, bids), "records/s")
}

func benchWindowJoin(b *testing.B) {
	k := newKafkaEnv(b)
	auctions, bids := k.topic("auctions", 4), k.topic("bids", 4)
	var recs []*kgo.Record
	base := time.Now().Add(-time.Hour)
	// Half the records are auctions, half bids on an auction opened shortly before.
	for i := range benchRecords / 2 {
		at := base.Add(time.Duration(i) * time.Millisecond)
		a := auction{ID: "a" + strconv.Itoa(i%5000), Seller: i, Category: i % 10}
		recs = append(recs, jsonRecord(auctions, a.ID, at, a))
		bd := bid{Auction: "a" + strconv.Itoa((i+3)%5000), Price: 2, Bidder: i}
		recs = append(recs, jsonRecord(bids, bd.Auction, at.Add(time.Millisecond), bd))
	}
	k.produce(recs...)
	v, err := views.Define("bench", func(bl *views.Builder) {
		enrich.JoinWindows(bl, "auction-bids", enrich.WindowJoin[auction, bid, bidWithAuction]{
			Left:  views.FromTopic(auctions, views.JSON[auction]()),
			Right: views.FromTopic(bids, views.JSON[bid]()),
			After: 10 * time.Second, Grace: time.Minute,
			Join: func(_ string, a *auction, bd *bid) bidWithAuction {
				return bidWithAuction{Bid: *bd, Category: a.Category}
			},
		}).To(k.app+"-out", views.JSON[bidWithAuction]())
	})
	must(b, err)
	b.ResetTimer()
	k.runtime(v)
	b.ReportMetric(k.throughput(b, benchRecords, auctions, bids), "records/s")
}

// throughput waits until the view's group committed n records of the topics and returns
// records/s from the first commit on.
func (k *kafkaEnv) throughput(b *testing.B, n int64, topics ...string) float64 {
	group := k.app + ".bench.v1"
	var first time.Time
	for {
		c := k.committed(group, topics...)
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
	return float64(n) / el.Seconds()
}

// committed sums the group's committed offsets over the topics' partitions.
func (k *kafkaEnv) committed(group string, topics ...string) int64 {
	offs, err := k.adm.FetchOffsets(context.Background(), group)
	if err != nil {
		return 0
	}
	var sum int64
	for _, t := range topics {
		for _, o := range offs[t] {
			sum += o.At
		}
	}
	return sum
}
