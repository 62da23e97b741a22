package nexmark

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
)

// ErrConfig is wrapped by every error [Config.Validate] returns; use errors.Is.
var ErrConfig = errors.New("nexmark: bad config")

// Proportions of the event kinds in every run of totalProportion events, as in Nexmark.
const (
	personProportion  = 1
	auctionProportion = 3
	bidProportion     = 46
	totalProportion   = personProportion + auctionProportion + bidProportion
)

// Shape of the generated data, as in Beam's Nexmark generator.
const (
	firstPersonID       = 1000
	firstAuctionID      = 1000
	firstCategoryID     = 10
	numCategories       = 5
	hotAuctionRatio     = 2 // 1 bid in 2 goes to a hot auction
	hotSellerRatio      = 4
	hotBidderRatio      = 4
	numActivePeople     = 1000
	numInFlightAuctions = 100
	personIDLead        = 10 // bids and auctions may name persons not created yet
	auctionIDLead       = 10 // bids may name auctions not created yet
	// Average JSON sizes: Beam's averages (200/500/100) are of Java objects; JSON needs
	// more for the same fields, so persons and bids are larger here.
	avgPersonBytes  = 250
	avgAuctionBytes = 500
	avgBidBytes     = 200
)

// Config says which events a [Generator] makes.
type Config struct {
	// Seed selects the events; the same seed gives the same events. Default 0.
	Seed uint64
	// Events is how many events to make. Default 1,000,000.
	Events int64
	// Rate is how many events happen per second of event time. Default 10,000.
	Rate int64
	// Start is the event time of event 0, in Unix milliseconds. Default 0 (the Unix epoch);
	// writers to Kafka should pass a recent time, because brokers delete segments whose
	// timestamps are older than the topic's retention and refuse timestamps far in the future.
	Start int64
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Events < 0 {
		errs = append(errs, fmt.Errorf("%w: Events %d is negative", ErrConfig, c.Events))
	}
	if c.Rate < 0 {
		errs = append(errs, fmt.Errorf("%w: Rate %d is negative; use a positive events-per-second", ErrConfig, c.Rate))
	}
	if c.Start < 0 {
		errs = append(errs, fmt.Errorf("%w: Start %d is before 1970", ErrConfig, c.Start))
	}
	return errors.Join(errs...)
}

func (c *Config) fillDefaults() {
	if c.Events == 0 {
		c.Events = 1_000_000
	}
	if c.Rate == 0 {
		c.Rate = 10_000
	}
}

// Kind is the kind of an event.
type Kind uint8

// The three kinds of event.
const (
	KindPerson Kind = iota
	KindAuction
	KindBid
)

func (k Kind) String() string {
	switch k {
	case KindPerson:
		return "person"
	case KindAuction:
		return "auction"
	case KindBid:
		return "bid"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Event is one generated event: the field named by Kind is set.
type Event struct {
	Kind    Kind
	Person  Person
	Auction Auction
	Bid     Bid
}

// Time returns the event's time in Unix milliseconds.
func (e *Event) Time() int64 {
	switch e.Kind {
	case KindPerson:
		return e.Person.DateTime
	case KindAuction:
		return e.Auction.DateTime
	}
	return e.Bid.DateTime
}

// Generator makes the events of one [Config]. It holds no mutable state, so it is safe for
// concurrent use.
type Generator struct {
	cfg Config
}

// NewGenerator copies cfg, fills its defaults and validates it.
func NewGenerator(cfg Config) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.fillDefaults()
	return &Generator{cfg: cfg}, nil
}

// Config returns the generator's configuration with defaults filled in.
func (g *Generator) Config() Config { return g.cfg }

// KindOf returns the kind of event n without generating it.
func KindOf(n int64) Kind {
	switch off := n % totalProportion; {
	case off < personProportion:
		return KindPerson
	case off < personProportion+auctionProportion:
		return KindAuction
	}
	return KindBid
}

// Event fills e with event n (0 ≤ n < Config.Events), reusing e's memory for nothing but the
// struct itself: strings are new.
func (g *Generator) Event(n int64, e *Event) {
	var r rng
	r.src.Seed(g.cfg.Seed, uint64(n))
	ts := g.cfg.Start + n*1000/g.cfg.Rate
	e.Kind = KindOf(n)
	switch e.Kind {
	case KindPerson:
		e.Person = newPerson(n, ts, &r)
	case KindAuction:
		e.Auction = newAuction(n, ts, &r)
	default:
		e.Bid = newBid(n, ts, &r)
	}
}

// lastBase0PersonID is the 0-based id of the newest person at event n.
func lastBase0PersonID(n int64) int64 {
	epoch, off := n/totalProportion, n%totalProportion
	if off >= personProportion {
		off = personProportion - 1
	}
	return epoch*personProportion + off
}

// lastBase0AuctionID is the 0-based id of the newest auction at event n (-1 before the first).
func lastBase0AuctionID(n int64) int64 {
	epoch, off := n/totalProportion, n%totalProportion
	switch {
	case off < personProportion:
		off = auctionProportion - 1
		epoch--
	case off >= personProportion+auctionProportion:
		off = auctionProportion - 1
	default:
		off -= personProportion
	}
	return epoch*auctionProportion + off
}

// nextBase0PersonID picks a recent person, or one a little ahead of the newest.
func nextBase0PersonID(n int64, r *rng) int64 {
	numPeople := lastBase0PersonID(n) + 1
	active := min(numPeople, numActivePeople)
	return numPeople - active + r.int64n(active+personIDLead)
}

// nextBase0AuctionID picks an auction in flight, or one a little ahead of the newest.
func nextBase0AuctionID(n int64, r *rng) int64 {
	maxAuction := lastBase0AuctionID(n)
	minAuction := max(maxAuction-numInFlightAuctions, 0)
	return minAuction + r.int64n(maxAuction-minAuction+1+auctionIDLead)
}

var (
	firstNames = []string{"Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"}
	lastNames  = []string{"Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"}
	usStates   = []string{"AZ", "CA", "ID", "OR", "WA", "WY"}
	usCities   = []string{"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"}
	channels   = []string{"Google", "Facebook", "Baidu", "Apple"}
)

func newPerson(n, ts int64, r *rng) Person {
	var scratch [512]byte
	p := Person{
		ID:           firstPersonID + lastBase0PersonID(n),
		Name:         r.pick(firstNames) + " " + r.pick(lastNames),
		EmailAddress: r.letters(7) + "@" + r.letters(5) + ".com",
		CreditCard:   r.digits(4) + " " + r.digits(4) + " " + r.digits(4) + " " + r.digits(4),
		City:         r.pick(usCities),
		State:        r.pick(usStates),
		DateTime:     ts,
	}
	p.Extra = r.extra(len(p.AppendJSON(scratch[:0])), avgPersonBytes)
	return p
}

func newAuction(n, ts int64, r *rng) Auction {
	var seller int64
	if r.int64n(hotSellerRatio) > 0 {
		seller = lastBase0PersonID(n) / hotSellerRatio * hotSellerRatio
	} else {
		seller = nextBase0PersonID(n, r)
	}
	var scratch [512]byte
	initial := r.price()
	a := Auction{
		ID:          firstAuctionID + lastBase0AuctionID(n),
		ItemName:    r.letters(20),
		Description: r.letters(100),
		InitialBid:  initial,
		Reserve:     initial + r.price(),
		DateTime:    ts,
		Expires:     ts + 2_000 + r.int64n(18_000),
		Seller:      firstPersonID + seller,
		Category:    firstCategoryID + r.int64n(numCategories),
	}
	a.Extra = r.extra(len(a.AppendJSON(scratch[:0])), avgAuctionBytes)
	return a
}

func newBid(n, ts int64, r *rng) Bid {
	var auction, bidder int64
	if r.int64n(hotAuctionRatio) > 0 {
		auction = lastBase0AuctionID(n) / hotAuctionRatio * hotAuctionRatio
	} else {
		auction = nextBase0AuctionID(n, r)
	}
	if r.int64n(hotBidderRatio) > 0 {
		bidder = lastBase0PersonID(n)/hotBidderRatio*hotBidderRatio + 1
	} else {
		bidder = nextBase0PersonID(n, r)
	}
	var scratch [512]byte
	b := Bid{
		Auction:  firstAuctionID + auction,
		Bidder:   firstPersonID + bidder,
		Price:    r.price(),
		DateTime: ts,
	}
	if c := r.int64n(int64(len(channels)) + 1); c < int64(len(channels)) {
		b.Channel = channels[c]
	} else {
		b.Channel = "channel-" + r.digits(4)
	}
	b.URL = "https://www.nexmark.com/" + r.letters(5) + "/" + r.letters(5) + "/item.htm?query=1"
	b.Extra = r.extra(len(b.AppendJSON(scratch[:0])), avgBidBytes)
	return b
}

// rng is the random source of one event: a PCG seeded with (seed, event number).
type rng struct {
	src rand.PCG
}

// int64n returns a uniform number in [0, n) by Lemire's multiply-and-reject method.
func (r *rng) int64n(n int64) int64 {
	if n <= 0 {
		return 0
	}
	un := uint64(n)
	hi, lo := bits.Mul64(r.src.Uint64(), un)
	if lo < un {
		thresh := -un % un
		for lo < thresh {
			hi, lo = bits.Mul64(r.src.Uint64(), un)
		}
	}
	return int64(hi)
}

func (r *rng) float64() float64 { return float64(r.src.Uint64()<<11>>11) / (1 << 53) }

func (r *rng) pick(s []string) string { return s[r.int64n(int64(len(s)))] }

// price is log-uniform between 100 and 100,000,000 cents.
func (r *rng) price() int64 { return int64(math.Round(math.Pow(10, r.float64()*6) * 100)) }

// letters returns n random lowercase letters, 13 from each 64-bit draw (26^13 < 2^64; the
// slight bias of taking digits modulo 26 does not matter here).
func (r *rng) letters(n int) string {
	b := make([]byte, n)
	for i := 0; i < n; {
		x := r.src.Uint64()
		for j := 0; j < 13 && i < n; j, i = j+1, i+1 {
			b[i] = byte('a' + x%26)
			x /= 26
		}
	}
	return string(b)
}

func (r *rng) digits(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('0' + r.int64n(10))
	}
	return string(b)
}

// extra pads a record whose JSON has size bytes so that records average avg bytes, ±20%.
func (r *rng) extra(size, avg int) string {
	if size >= avg {
		return ""
	}
	want := avg - size
	delta := want / 5
	return r.letters(want - delta + int(r.int64n(int64(2*delta+1))))
}
