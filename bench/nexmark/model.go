package nexmark

import (
	"strconv"
	"unicode/utf8"
)

// Person is a new user of the auction site. Its JSON is the value of a record of the person
// topic, keyed by ID in decimal.
type Person struct {
	ID           int64  `json:"id"`
	Name         string `json:"name"`
	EmailAddress string `json:"emailAddress"`
	CreditCard   string `json:"creditCard"`
	City         string `json:"city"`
	State        string `json:"state"`
	DateTime     int64  `json:"dateTime"` // event time, Unix milliseconds
	Extra        string `json:"extra"`
}

// Auction is an item put up for sale. Its JSON is the value of a record of the auction topic,
// keyed by ID in decimal.
type Auction struct {
	ID          int64  `json:"id"`
	ItemName    string `json:"itemName"`
	Description string `json:"description"`
	InitialBid  int64  `json:"initialBid"` // cents
	Reserve     int64  `json:"reserve"`    // cents
	DateTime    int64  `json:"dateTime"`   // event time, Unix milliseconds
	Expires     int64  `json:"expires"`    // Unix milliseconds
	Seller      int64  `json:"seller"`     // a Person.ID
	Category    int64  `json:"category"`
	Extra       string `json:"extra"`
}

// Bid is an offer for an auction. Its JSON is the value of a record of the bid topic, keyed by
// Auction in decimal, so bids are co-partitioned with their auctions.
type Bid struct {
	Auction  int64  `json:"auction"` // an Auction.ID
	Bidder   int64  `json:"bidder"`  // a Person.ID
	Price    int64  `json:"price"`   // cents
	Channel  string `json:"channel"`
	URL      string `json:"url"`
	DateTime int64  `json:"dateTime"` // event time, Unix milliseconds
	Extra    string `json:"extra"`
}

// AppendJSON appends p as JSON with fields in declaration order, as encoding/json would.
func (p *Person) AppendJSON(b []byte) []byte {
	b = appendInt(b, `{"id":`, p.ID)
	b = appendStr(b, `,"name":`, p.Name)
	b = appendStr(b, `,"emailAddress":`, p.EmailAddress)
	b = appendStr(b, `,"creditCard":`, p.CreditCard)
	b = appendStr(b, `,"city":`, p.City)
	b = appendStr(b, `,"state":`, p.State)
	b = appendInt(b, `,"dateTime":`, p.DateTime)
	b = appendStr(b, `,"extra":`, p.Extra)
	return append(b, '}')
}

// AppendJSON appends a as JSON with fields in declaration order, as encoding/json would.
func (a *Auction) AppendJSON(b []byte) []byte {
	b = appendInt(b, `{"id":`, a.ID)
	b = appendStr(b, `,"itemName":`, a.ItemName)
	b = appendStr(b, `,"description":`, a.Description)
	b = appendInt(b, `,"initialBid":`, a.InitialBid)
	b = appendInt(b, `,"reserve":`, a.Reserve)
	b = appendInt(b, `,"dateTime":`, a.DateTime)
	b = appendInt(b, `,"expires":`, a.Expires)
	b = appendInt(b, `,"seller":`, a.Seller)
	b = appendInt(b, `,"category":`, a.Category)
	b = appendStr(b, `,"extra":`, a.Extra)
	return append(b, '}')
}

// AppendJSON appends x as JSON with fields in declaration order, as encoding/json would.
func (x *Bid) AppendJSON(b []byte) []byte {
	b = appendInt(b, `{"auction":`, x.Auction)
	b = appendInt(b, `,"bidder":`, x.Bidder)
	b = appendInt(b, `,"price":`, x.Price)
	b = appendStr(b, `,"channel":`, x.Channel)
	b = appendStr(b, `,"url":`, x.URL)
	b = appendInt(b, `,"dateTime":`, x.DateTime)
	b = appendStr(b, `,"extra":`, x.Extra)
	return append(b, '}')
}

func appendInt(b []byte, field string, v int64) []byte {
	return strconv.AppendInt(append(b, field...), v, 10)
}

// appendStr appends field and s as a JSON string. The generator makes only printable ASCII,
// which goes through as is; anything else is escaped so the output stays valid JSON.
func appendStr(b []byte, field, s string) []byte {
	b = append(append(b, field...), '"')
	if plain(s) {
		return append(append(b, s...), '"')
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, `\u00`...)
			b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
		case c < utf8.RuneSelf:
			b = append(b, c)
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size - 1
		}
	}
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// plain reports whether s is printable ASCII without quote or backslash: the generator's
// strings, which need no escaping.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
