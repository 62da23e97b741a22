package tarnq

import (
	"strconv"
	"time"

	"github.com/tarnhq/tarn/bench/nexmark"
	"github.com/tarnhq/tarn/enrich"
	"github.com/tarnhq/tarn/state"
	"github.com/tarnhq/tarn/views"
)

// The joins q3, q8 and q20 (package enrich).
//
// Stream–table time: a co-partitioned table copy (enrich.JoinTable over views.CoTable) is
// caught up to the end its topic had when the task started before the task joins its first
// record, and the benchmark writes every input before the run, so the copy holds the whole
// table from the first record on. Kafka Streams instead joins each record with the table as
// of its time. Nexmark rows are inserted once and never updated, so the table as of time t is
// exactly the rows whose dateTime is not later than t: the joins below keep a match only
// when the row is not later than the stream record, which gives the event-time answer
// whatever the order in which the runtime read the two topics.

// LocalItem is q3's output: an auction of category 10 with its seller's location.
type LocalItem struct {
	Name  string `json:"name"`
	City  string `json:"city"`
	State string `json:"state"`
	ID    int64  `json:"id"`
}

// q3Category is the auction category q3 and q20 keep.
const q3Category = 10

// LocalState reports whether q3 keeps a seller of state s: OR, ID or CA.
func LocalState(s string) bool { return s == "OR" || s == "ID" || s == "CA" }

func auctionSource(b *views.Builder, t nexmark.Topics) *views.Stream[nexmark.Auction] {
	return views.Source(b, t.Auction, views.JSON[nexmark.Auction](),
		views.EventTime(func(a nexmark.Auction) time.Time { return time.UnixMilli(a.DateTime) }))
}

// q3 filters auctions of category 10, repartitions them by seller (enrich.JoinTable's Key)
// and joins each with the person table, keeping sellers in OR, ID or CA. The peer
// materialises only the persons of those states; the co-table keeps every person of its
// partition and the state is checked at the join.
func q3(t nexmark.Topics, output string) (*Plan, error) {
	v, err := views.Define("nexmark-q3", func(b *views.Builder) {
		cat := auctionSource(b, t).Filter("category-10", func(_ string, a nexmark.Auction) bool { return a.Category == q3Category })
		joined := enrich.JoinTable(cat, "seller", enrich.TableJoin[nexmark.Auction, nexmark.Person, *LocalItem]{
			Table: enrich.TopicTable(t.Person, views.JSON[nexmark.Person]()),
			Key:   func(_ string, a nexmark.Auction) string { return strconv.FormatInt(a.Seller, 10) },
			Join: func(_ string, a nexmark.Auction, p *nexmark.Person) *LocalItem {
				if p.DateTime > a.DateTime || !LocalState(p.State) {
					return nil
				}
				return &LocalItem{Name: p.Name, City: p.City, State: p.State, ID: a.ID}
			},
		})
		found(joined).To(output, views.JSON[*LocalItem]())
	})
	if err != nil {
		return nil, err
	}
	p := &Plan{Inputs: []string{t.Person, t.Auction}}
	// The person topic is a side input, read outside the view's group: only the auctions and
	// their repartition topic are committed.
	p.add(v, source{name: t.Auction}, source{repartition: "seller-by-key"})
	return p, nil
}

// found drops the joins that a join function rejected (nil).
func found[W any](s *views.Stream[*W]) *views.Stream[*W] {
	return s.Filter("found", func(_ string, w *W) bool { return w != nil })
}

// NewSeller is q8's output: a person and an auction they opened in the same tumbling window.
type NewSeller struct {
	ID          int64  `json:"id"`
	Name        string `json:"name"`
	WindowStart int64  `json:"windowStart"`
	Auction     int64  `json:"auction"`
}

const (
	q8Window = 10 * time.Second
	// q8Grace is the join's grace: the person topic is read far ahead of the auctions, which
	// arrive through a repartition topic, so with the README's 5 s the auctions would be late
	// by the join's stream time (the largest time seen on either input) and dropped — which
	// is why the peer's output varies from run to run. An hour covers any run's skew, so every
	// pair of the definition is found.
	q8Grace = time.Hour
)

// q8 repartitions auctions by seller and joins them with persons in a windowed join of one
// window size either way (the peer's JoinWindows), keeping the pairs in the same tumbling
// window.
func q8(t nexmark.Topics, output string) (*Plan, error) {
	size := q8Window.Milliseconds()
	v, err := views.Define("nexmark-q8", func(b *views.Builder) {
		bySeller := views.SelectKey(auctionSource(b, t), "by-seller", func(_ string, a nexmark.Auction) string {
			return strconv.FormatInt(a.Seller, 10)
		})
		persons := views.FromTopic(t.Person, views.JSON[nexmark.Person](),
			views.EventTime(func(p nexmark.Person) time.Time { return time.UnixMilli(p.DateTime) }))
		joined := enrich.JoinWindows(b, "join", enrich.WindowJoin[nexmark.Person, nexmark.Auction, *NewSeller]{
			Left:   persons,
			Right:  views.FromStream(bySeller, views.JSON[nexmark.Auction]()),
			Before: q8Window,
			After:  q8Window,
			Grace:  q8Grace,
			Join: func(_ string, p *nexmark.Person, a *nexmark.Auction) *NewSeller {
				start := floorDiv(p.DateTime, size) * size
				if floorDiv(a.DateTime, size)*size != start {
					return nil
				}
				return &NewSeller{ID: p.ID, Name: p.Name, WindowStart: start, Auction: a.ID}
			},
		})
		found(joined).To(output, views.JSON[*NewSeller]())
	})
	if err != nil {
		return nil, err
	}
	p := &Plan{Inputs: []string{t.Person, t.Auction}}
	p.add(v, source{name: t.Person}, source{name: t.Auction}, source{repartition: "join-in-right"})
	// enrich.JoinWindows buffers both sides in one window store spanning Before + After.
	p.windowed("nexmark-q8", "join-buffer", state.WindowOptions{Size: 2*q8Window + time.Millisecond, Grace: q8Grace})
	return p, nil
}

// BidWithAuction is q20's output: a bid with the auction it names.
type BidWithAuction struct {
	Auction     int64  `json:"auction"`
	Bidder      int64  `json:"bidder"`
	Price       int64  `json:"price"`
	Channel     string `json:"channel"`
	URL         string `json:"url"`
	DateTime    int64  `json:"dateTime"`
	ItemName    string `json:"itemName"`
	Description string `json:"description"`
	InitialBid  int64  `json:"initialBid"`
	Reserve     int64  `json:"reserve"`
	Expires     int64  `json:"expires"`
	Seller      int64  `json:"seller"`
	Category    int64  `json:"category"`
}

// q20 joins every bid with the auction table: bids are keyed by auction and co-partitioned
// with it, so nothing is repartitioned. The peer materialises only auctions of category 10;
// the co-table keeps every auction of its partition and the category is checked at the join.
func q20(t nexmark.Topics, output string) (*Plan, error) {
	v, err := views.Define("nexmark-q20", func(b *views.Builder) {
		joined := enrich.JoinTable(bidSource(b, t), "auction", enrich.TableJoin[nexmark.Bid, nexmark.Auction, *BidWithAuction]{
			Table: enrich.TopicTable(t.Auction, views.JSON[nexmark.Auction]()),
			Join: func(_ string, x nexmark.Bid, a *nexmark.Auction) *BidWithAuction {
				if a.DateTime > x.DateTime || a.Category != q3Category {
					return nil
				}
				return &BidWithAuction{Auction: x.Auction, Bidder: x.Bidder, Price: x.Price, Channel: x.Channel, URL: x.URL,
					DateTime: x.DateTime, ItemName: a.ItemName, Description: a.Description, InitialBid: a.InitialBid,
					Reserve: a.Reserve, Expires: a.Expires, Seller: a.Seller, Category: a.Category}
			},
		})
		found(joined).To(output, views.JSON[*BidWithAuction]())
	})
	if err != nil {
		return nil, err
	}
	p := &Plan{Inputs: []string{t.Bid, t.Auction}}
	p.add(v, source{name: t.Bid})
	return p, nil
}
