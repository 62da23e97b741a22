package nexmark

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

func mustGenerator(t *testing.T, cfg Config) *Generator {
	t.Helper()
	g, err := NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func encoded(g *Generator, n int64) []byte {
	var e Event
	g.Event(n, &e)
	b := e.appendKey(nil)
	b = append(b, '|')
	return e.appendValue(b)
}

func TestSameSeedSameBytes(t *testing.T) {
	a := mustGenerator(t, Config{Seed: 7, Start: 1_700_000_000_000})
	b := mustGenerator(t, Config{Seed: 7, Start: 1_700_000_000_000})
	c := mustGenerator(t, Config{Seed: 8, Start: 1_700_000_000_000})
	differ := 0
	for n := int64(0); n < 20_000; n++ {
		x := encoded(a, n)
		if y := encoded(b, n); !bytes.Equal(x, y) {
			t.Fatalf("event %d: same seed, different bytes:\n%s\n%s", n, x, y)
		}
		if !bytes.Equal(x, encoded(c, n)) {
			differ++
		}
	}
	if differ < 19_000 {
		t.Errorf("seeds 7 and 8 differ in only %d of 20000 events", differ)
	}
}

func TestProportions(t *testing.T) {
	var kinds [3]int
	for n := int64(0); n < 50_000; n++ {
		kinds[KindOf(n)]++
	}
	if kinds != [3]int{1000, 3000, 46000} {
		t.Errorf("kinds of 50000 events = %v, want [1000 3000 46000]", kinds)
	}
}

// TestIDs checks that ids are dense and ordered, and that bids and auctions name persons and
// auctions that exist or are at most the lead ahead, as in Nexmark.
func TestIDs(t *testing.T) {
	g := mustGenerator(t, Config{Seed: 1, Rate: 1000})
	var e Event
	nextPerson, nextAuction := int64(firstPersonID), int64(firstAuctionID)
	lastTime := int64(-1)
	for n := int64(0); n < 100_000; n++ {
		g.Event(n, &e)
		if e.Time() < lastTime {
			t.Fatalf("event %d: time %d before %d", n, e.Time(), lastTime)
		}
		lastTime = e.Time()
		switch e.Kind {
		case KindPerson:
			if e.Person.ID != nextPerson {
				t.Fatalf("event %d: person id %d, want %d", n, e.Person.ID, nextPerson)
			}
			nextPerson++
		case KindAuction:
			if e.Auction.ID != nextAuction {
				t.Fatalf("event %d: auction id %d, want %d", n, e.Auction.ID, nextAuction)
			}
			nextAuction++
			if s := e.Auction.Seller; s < firstPersonID || s >= nextPerson+personIDLead {
				t.Fatalf("event %d: seller %d, persons so far end at %d", n, s, nextPerson)
			}
			if c := e.Auction.Category; c < firstCategoryID || c >= firstCategoryID+numCategories {
				t.Fatalf("event %d: category %d", n, c)
			}
		case KindBid:
			if a := e.Bid.Auction; a < firstAuctionID || a >= nextAuction+auctionIDLead {
				t.Fatalf("event %d: bid on auction %d, auctions so far end at %d", n, a, nextAuction)
			}
			if b := e.Bid.Bidder; b < firstPersonID || b >= nextPerson+personIDLead {
				t.Fatalf("event %d: bidder %d, persons so far end at %d", n, b, nextPerson)
			}
			if p := e.Bid.Price; p < 100 || p > 100_000_000 {
				t.Fatalf("event %d: price %d out of [100, 1e8]", n, p)
			}
		}
	}
	if lastTime != 99_999 {
		t.Errorf("event 99999 at %d ms, want 99999 at 1000 events/s", lastTime)
	}
}

// TestJSONMatchesEncodingJSON checks the hand-written encoders against encoding/json, so that
// any JSON decoder (tarn's, Jackson) reads the fields the README documents.
func TestJSONMatchesEncodingJSON(t *testing.T) {
	g := mustGenerator(t, Config{Seed: 3})
	var e Event
	for n := int64(0); n < 5_000; n++ {
		g.Event(n, &e)
		var want []byte
		var err error
		switch e.Kind {
		case KindPerson:
			want, err = json.Marshal(e.Person)
		case KindAuction:
			want, err = json.Marshal(e.Auction)
		default:
			want, err = json.Marshal(e.Bid)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := e.appendValue(nil); !bytes.Equal(got, want) {
			t.Fatalf("event %d %s:\n got %s\nwant %s", n, e.Kind, got, want)
		}
	}
}

func TestAppendStrEscapes(t *testing.T) {
	for _, s := range []string{"plain", `q"uote`, `back\slash`, "tab\tnl\n", "ünïcode", "bad\xffbyte"} {
		got := appendStr(nil, "", s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q encoded as %s, not JSON: %v", s, got, err)
		}
		want := s
		if s == "bad\xffbyte" {
			want = "bad\ufffdbyte"
		}
		if back != want {
			t.Errorf("%q encoded as %s decodes to %q", s, got, back)
		}
	}
}

func TestAverageSizes(t *testing.T) {
	g := mustGenerator(t, Config{Seed: 5, Start: 1_700_000_000_000})
	var sum, count [3]int
	var e Event
	for n := int64(0); n < 50_000; n++ {
		g.Event(n, &e)
		sum[e.Kind] += len(e.appendValue(nil))
		count[e.Kind]++
	}
	for k, want := range []int{avgPersonBytes, avgAuctionBytes, avgBidBytes} {
		avg := sum[k] / count[k]
		if avg < want*9/10 || avg > want*11/10 {
			t.Errorf("%s: average %d bytes, want about %d", Kind(k), avg, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	err := Config{Events: -1, Rate: -2, Start: -3}.Validate()
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("Validate = %v, want ErrConfig", err)
	}
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 3 {
		t.Errorf("Validate joined %d problems, want 3: %v", n, err)
	}
	werr := WriteConfig{Compression: "brotli", Partitions: -1}.Validate()
	for _, want := range []string{"no brokers", "brotli", "Partitions -1"} {
		if !bytes.Contains([]byte(werr.Error()), []byte(want)) {
			t.Errorf("WriteConfig.Validate = %v, want it to mention %q", werr, want)
		}
	}
}

func BenchmarkEncodeChunk(b *testing.B) {
	g := mustGenerator(&testing.T{}, Config{Start: 1_700_000_000_000})
	cfg := WriteConfig{Partitions: 4}
	cfg.fillDefaults()
	b.ReportAllocs()
	for b.Loop() {
		encodeChunk(g, cfg, 0, chunkEvents)
	}
	b.ReportMetric(float64(chunkEvents*b.N)/b.Elapsed().Seconds(), "events/s")
}
