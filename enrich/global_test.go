package enrich_test

import (
	"encoding/json"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/tarnhq/tarn/enrich"
	"github.com/tarnhq/tarn/views"
	"github.com/twmb/franz-go/pkg/kgo"
)

type country struct {
	Code string `json:"code"`
	Name string `json:"name"`
}

type order struct {
	ID      string `json:"id"`
	Country string `json:"country"`
}

type orderWithCountry struct {
	Order   order    `json:"order"`
	Country *country `json:"country"`
}

// A global table is copied whole to every instance: two instances share the orders'
// partitions, and every order, whatever its partition, finds its country; a changed country
// is seen by orders produced after the change reached the table topic; an inner join drops
// orders of unknown countries.
func TestGlobalTableOnEveryInstance(t *testing.T) {
	k := newKafkaEnv(t)
	countries := k.topic("countries", 1)
	orders := k.topic("orders", 4)
	out := k.app + "-orders-with-country"
	rows := map[string]country{}
	put := func(cs ...country) {
		var recs []*kgo.Record
		for _, c := range cs {
			rows[c.Code] = c
			recs = append(recs, jsonRecord(countries, c.Code, time.Now(), c))
		}
		k.produce(recs...)
	}
	put(country{"de", "Germany"}, country{"fr", "France"}, country{"jp", "Japan"})
	v, err := views.Define("orders", func(b *views.Builder) {
		s := views.Source(b, orders, views.JSON[order]())
		enrich.JoinGlobal(s, "with-country", enrich.GlobalJoin[order, country, orderWithCountry]{
			Table: enrich.TopicTable(countries, views.JSON[country]()),
			Key:   func(_ string, o order) string { return o.Country },
			Join:  func(_ string, o order, c *country) orderWithCountry { return orderWithCountry{Order: o, Country: c} },
		}).To(out, views.JSON[orderWithCountry]())
	})
	must(t, err)
	k.runtime(v)
	k.runtime(v)
	outputs := k.reader(out)
	codes := []string{"de", "fr", "jp", "xx"}
	round := func(prefix string) {
		t.Helper()
		want := map[string]string{}
		var recs []*kgo.Record
		for i := range 80 {
			o := order{ID: prefix + strconv.Itoa(i), Country: codes[i%len(codes)]}
			if c, ok := rows[o.Country]; ok {
				raw, _ := json.Marshal(c)
				want[o.ID] = string(raw)
			}
			recs = append(recs, jsonRecord(orders, o.ID, time.Now(), o))
		}
		k.produce(recs...)
		got := map[string]string{}
		for _, r := range outputs.read(len(want)) {
			var o orderWithCountry
			must(t, json.Unmarshal(r.Value, &o))
			raw, _ := json.Marshal(o.Country)
			got[o.Order.ID] = string(raw)
		}
		if !maps.Equal(got, want) {
			t.Errorf("round %s: joined orders differ: %v", prefix, diff(got, want))
		}
	}
	round("a")
	put(country{"fr", "République française"}, country{"xx", "Nowhere"})
	round("b")
	if extra := outputs.quiet(500 * time.Millisecond); len(extra) > 0 {
		t.Errorf("%d unexpected outputs, first %s", len(extra), extra[0].Value)
	}
}
