package serve

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// The seed corpora are in testdata/fuzz/<FuzzName>; the fuzzers ran for a while in the
// work on issue 7 and their findings were kept there.

func FuzzParsePosition(f *testing.F) {
	f.Add(Position{Offsets: map[int32]int64{0: 0, 3: 41, 7: 1 << 40}, LSN: 0x16B374D848}.Token())
	f.Add(Position{}.Token())
	f.Add("AQACAAABAA")
	f.Fuzz(func(t *testing.T, token string) {
		p, err := ParsePosition(token)
		if err != nil {
			if !errors.Is(err, ErrBadPosition) {
				t.Fatalf("error %v does not wrap ErrBadPosition", err)
			}
			return
		}
		if got := p.Token(); got != token {
			t.Fatalf("token %q parses to %+v, which encodes as %q", token, p, got)
		}
		for part, off := range p.Offsets {
			if part < 0 || off < 0 {
				t.Fatalf("negative partition or offset in %+v", p)
			}
		}
		if !p.Reached(p) || !p.Merge(p).Reached(p) || !p.Reached(p.Merge(Position{})) {
			t.Fatalf("%+v does not reach itself", p)
		}
	})
}

func FuzzParams(f *testing.F) {
	for _, q := range []string{
		"prefix=user/&limit=10", "start=a&end=b&cursor=AWI", "enc=b64&start=AA&end=_w&partitions=0,1,5",
		"from=2026-01-01T00:00:00Z&to=1767225600001", "watch=sse&after=AQACAAABAA", "after=AQACAAABAA&wait=30s",
		"min_offsets=0:41,3:7&min_lsn=16/B374D848&wait=250ms",
		"min_offsets=trades:3:1041,trades:0:0&wait=2s", "min_offsets=t:0:1,0:5", "min_offsets=bad%20topic:0:1", "limit=1&limit=2", "cursor=%%%", "x=1",
	} {
		f.Add(q)
	}
	lim := limits{defaultLimit: 100, maxLimit: 1000, maxWait: 30 * time.Second}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, set := range []paramSet{keyParams, scanParams, changeParams, listParams} {
			p, err := parseParams(raw, set, lim)
			if err != nil {
				var pe *paramError
				if !errors.As(err, &pe) || pe.param == "" {
					t.Fatalf("error %v does not name a parameter", err)
				}
				continue
			}
			checkParams(t, raw, p, lim)
		}
	})
}

// checkParams checks what parseParams promises about parameters it accepted.
func checkParams(t *testing.T, raw string, p params, lim limits) {
	t.Helper()
	if p.limit < 1 || p.limit > lim.maxLimit {
		t.Fatalf("%q: limit %d", raw, p.limit)
	}
	if p.hasEnd && bytes.Compare(p.start, p.end) > 0 {
		t.Fatalf("%q: start %q after end %q", raw, p.start, p.end)
	}
	if p.hasPrefix && (!bytes.HasPrefix(p.start, p.prefix) || (p.end != nil && bytes.HasPrefix(p.end, p.prefix))) {
		t.Fatalf("%q: prefix %q gave range [%q, %q)", raw, p.prefix, p.start, p.end)
	}
	if p.cursor != nil {
		if version, back, err := parseCursor(makeCursor(p.cursorVersion, p.cursor)); err != nil || version != p.cursorVersion || !bytes.Equal(back, p.cursor) {
			t.Fatalf("%q: cursor %q does not round-trip", raw, p.cursor)
		}
	}
	if p.hasWait && (p.wait <= 0 || p.wait > lim.maxWait) {
		t.Fatalf("%q: wait %s", raw, p.wait)
	}
	if p.windows && !p.from.Before(p.to) {
		t.Fatalf("%q: windows from %s to %s", raw, p.from, p.to)
	}
	for i := 1; i < len(p.partitions); i++ {
		if p.partitions[i] <= p.partitions[i-1] {
			t.Fatalf("%q: partitions %v", raw, p.partitions)
		}
	}
	for _, off := range p.min.Offsets {
		if off < 1 {
			t.Fatalf("%q: min offset %d", raw, off)
		}
	}
	for topic, parts := range p.inputs {
		for part, off := range parts {
			if checkTopicName(topic) != nil || part < 0 || off < 1 {
				t.Fatalf("%q: min offset %s %d:%d", raw, topic, part, off)
			}
		}
	}
}

func FuzzMinOffsetsAndLSN(f *testing.F) {
	f.Add("0:41,3:7", "16/B374D848")
	f.Add("2147483647:9223372036854775806", "FFFFFFFF/FFFFFFFF")
	f.Add("-1:0", "0/0")
	f.Add("trades:3:1041,orders.v2:0:7,1:2", "0/1")
	f.Add("trades::1,a:b:c:d", "1/")
	f.Fuzz(func(t *testing.T, offsets, lsn string) {
		if p, in, err := ParseMinOffsets(offsets); err == nil {
			if len(p.Offsets) == 0 && len(in) == 0 {
				t.Fatalf("%q gave nothing to wait for", offsets)
			}
			for part, off := range p.Offsets {
				if part < 0 || off < 1 {
					t.Fatalf("%q gave %+v", offsets, p)
				}
			}
			for topic, parts := range in {
				if checkTopicName(topic) != nil || strings.Contains(topic, ":") {
					t.Fatalf("%q gave topic %q", offsets, topic)
				}
				for part, off := range parts {
					if part < 0 || off < 1 {
						t.Fatalf("%q gave %s %d:%d", offsets, topic, part, off)
					}
				}
			}
			if back, err := ParsePosition(p.Token()); err != nil || back.Token() != p.Token() {
				t.Fatalf("%q: position does not round-trip: %v", offsets, err)
			}
		} else if !errors.Is(err, ErrBadPosition) {
			t.Fatal(err)
		}
		if l, err := ParseLSN(lsn); err == nil {
			if back, err := ParseLSN(l.String()); err != nil || back != l {
				t.Fatalf("LSN %q -> %d -> %q does not round-trip", lsn, l, l.String())
			}
		}
	})
}

func FuzzPathKey(f *testing.F) {
	f.Add("user%2F1", false)
	f.Add("_wA", true)
	f.Add("%FF", false)
	f.Fuzz(func(t *testing.T, raw string, b64 bool) {
		k, err := pathKey(raw, b64)
		if err != nil {
			var pe *paramError
			if !errors.As(err, &pe) || pe.param != "key" {
				t.Fatalf("error %v does not name the key", err)
			}
			return
		}
		if len(k) == 0 || len(k) > maxKeyBytes {
			t.Fatalf("%q: key of %d bytes", raw, len(k))
		}
		enc, isB64 := encodeKey(k, b64)
		if back, err := decodeKey("key", enc, isB64, false); err != nil || !bytes.Equal(back, k) {
			t.Fatalf("%q: key %q does not round-trip through %q: %v", raw, k, enc, err)
		}
	})
}
