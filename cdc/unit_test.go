package cdc

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestLSN(t *testing.T) {
	for _, tt := range []struct {
		s string
		l LSN
	}{{"0/0", 0}, {"0/16B3748", 0x16B3748}, {"16/B374D848", 0x16_B374D848}, {"FFFFFFFF/FFFFFFFF", ^LSN(0)}} {
		got, err := ParseLSN(tt.s)
		if err != nil || got != tt.l || got.String() != tt.s {
			t.Errorf("ParseLSN(%q) = %v (%s), %v; want %d", tt.s, uint64(got), got, err, uint64(tt.l))
		}
	}
	for _, bad := range []string{"", "0", "/1", "1/", "1/2/3", "x/1", "123456789/0", " 1/2", "-1/2"} {
		if _, err := ParseLSN(bad); !errors.Is(err, ErrBadLSN) {
			t.Errorf("ParseLSN(%q) = %v, want ErrBadLSN", bad, err)
		}
	}
}

func FuzzParseLSN(f *testing.F) {
	f.Add("16/B374D848")
	f.Add("0/0")
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLSN(s)
		if err != nil {
			return
		}
		back, err := ParseLSN(l.String())
		if err != nil || back != l {
			t.Fatalf("%q → %s → %v, %v", s, l, back, err)
		}
	})
}

func TestKeys(t *testing.T) {
	if got := string(EncodeKey("42")); got != "42" {
		t.Errorf("single key = %q", got)
	}
	if got := string(EncodeKey("42", `a"b`)); got != `["42","a\"b"]` {
		t.Errorf("composite key = %q", got)
	}
	// One canonical form, the one a client writes by hand: no HTML escaping, no spaces.
	if got := string(EncodeKey("a&b", "<c>/d e", "é€")); got != `["a&b","<c>/d e","é€"]` {
		t.Errorf("composite key with & < / space unicode = %q", got)
	}
	x := "x"
	if got := string(EncodeKeyNullable([]*string{&x, nil})); got != `["x",null]` {
		t.Errorf("nullable key = %q", got)
	}
	if _, err := DecodeKey([]byte(`["1"]`), 2); err == nil {
		t.Error("DecodeKey accepted a key with too few parts")
	}
}

func FuzzKeyRoundTrip(f *testing.F) {
	f.Add("a", "b")
	f.Add("", "\x00")
	f.Fuzz(func(t *testing.T, a, b string) {
		parts, err := DecodeKey(EncodeKey(a, b), 2)
		if err != nil {
			t.Fatal(err)
		}
		// JSON replaces invalid UTF-8; Postgres text is valid UTF-8, so only that must survive.
		if strings.ToValidUTF8(a, "\uFFFD") == a && strings.ToValidUTF8(b, "\uFFFD") == b && (parts[0] != a || parts[1] != b) {
			t.Fatalf("%q %q → %q", a, b, parts)
		}
		if string(EncodeKey(a, b)) == string(TruncateKey) {
			t.Fatal("a row key equals the truncate key")
		}
	})
}

func TestRecordHelpers(t *testing.T) {
	h := newTxnHeaders(0x10, 7, testTime)
	r := h.record("t", 3, []byte("k"), []byte(`{"a":1}`), OpInsert, 5)
	if p, err := RecordPosition(r); err != nil || p != (Position{LSN: 0x10, Seq: 5}) {
		t.Errorf("RecordPosition = %v, %v", p, err)
	}
	if op, _ := RecordOp(r); op != OpInsert || IsTruncate(r) || IsDelete(r) {
		t.Errorf("op %q, truncate %v, delete %v", op, IsTruncate(r), IsDelete(r))
	}
	if ct, err := RecordCommitTime(r); err != nil || !ct.Equal(testTime) {
		t.Errorf("RecordCommitTime = %v, %v", ct, err)
	}
	seq := uint64(0)
	ms := h.truncateMarkers(&table{topic: "t", partitions: 3}, &seq)
	for i, m := range ms {
		if !IsTruncate(m) || m.Partition != int32(i) || IsDelete(m) {
			t.Errorf("marker %d: truncate %v partition %d", i, IsTruncate(m), m.Partition)
		}
	}
	if _, err := RecordLSN(&kgo.Record{}); !errors.Is(err, ErrNotCDC) {
		t.Errorf("RecordLSN of a bare record = %v, want ErrNotCDC", err)
	}
	if row, err := DecodeRow([]byte(`{"n":1.50,"j":{"x":[1]}}`)); err != nil || string(row["n"]) != "1.50" || string(row["j"]) != `{"x":[1]}` {
		t.Errorf("DecodeRow = %v, %v", row, err)
	}
}

func TestConfigValidate(t *testing.T) {
	c := Config{App: "a.b", Tables: []string{"users", "public.x", "public.x"}, Partitions: -1, Slot: "Bad"}
	c.setDefaults()
	err := c.Validate()
	for _, want := range []string{"PostgresURL", "App", "Slot", "not schema-qualified", "listed twice", "Partitions", "Brokers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() does not mention %s: %v", want, err)
		}
	}
	if !errors.Is(err, ErrConfig) {
		t.Errorf("Validate() = %v, want ErrConfig", err)
	}
	ok := Config{PostgresURL: "postgres://x", App: "shop", Tables: []string{"public.users"}, Brokers: []string{"k:9092"}}
	ok.setDefaults()
	if err := ok.Validate(); err != nil || ok.Slot != "tarn_shop" || ok.Partitions != 3 {
		t.Errorf("defaults: %v, slot %q, partitions %d", err, ok.Slot, ok.Partitions)
	}
}

var testTime = mustTime("2024-05-01T10:00:00.123456Z")

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}
