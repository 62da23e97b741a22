package outputs

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestCanonical(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{`{"a":1,"b":2}`, `{"b":2.0,"a":1}`},
		{`{"price":1.1804E7}`, `{"price":11804000}`},
		{`{"avg":0.1}`, `{ "avg" : 1e-1 }`},
		{`[1,"x",null,true]`, `[1.0, "x", null, true]`},
		{`not json`, `not json`},
	} {
		if a, b := string(Canonical([]byte(tc.a))), string(Canonical([]byte(tc.b))); a != b {
			t.Errorf("Canonical(%s) = %s, Canonical(%s) = %s; want equal", tc.a, a, tc.b, b)
		}
	}
	for _, tc := range []struct{ a, b string }{
		{`{"a":1}`, `{"a":2}`},
		{`{"a":"1"}`, `{"a":1}`},
		{`{"a":1}`, `{"a":1,"b":null}`},
		{`1`, `not json`},
	} {
		if a, b := string(Canonical([]byte(tc.a))), string(Canonical([]byte(tc.b))); a == b {
			t.Errorf("Canonical(%s) = Canonical(%s) = %s; want different", tc.a, tc.b, a)
		}
	}
	if Canonical(nil) != nil {
		t.Error("Canonical(nil) is not nil")
	}
}

// rec is a record of partition p; an empty value is a tombstone.
func rec(p int32, key, value string) *kgo.Record {
	r := &kgo.Record{Partition: p, Key: []byte(key)}
	if value != "" {
		r.Value = []byte(value)
	}
	return r
}

func summary(t *testing.T, k Kind, recs ...*kgo.Record) *Summary {
	s := NewSummary("t", k)
	for _, r := range recs {
		if err := s.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind Kind
		a, b []*kgo.Record
		want Verdict
	}{
		{"stream equal in another order", Stream,
			[]*kgo.Record{rec(0, "1", `{"x":1}`), rec(1, "2", `{"x":2}`), rec(0, "1", `{"x":1}`)},
			[]*kgo.Record{rec(1, "2", `{"x":2.0}`), rec(0, "1", `{"x":1}`), rec(0, "1", `{"x":1}`)},
			Verdict{Equal: true}},
		{"stream multiplicity counts", Stream,
			[]*kgo.Record{rec(0, "1", `{"x":1}`), rec(0, "1", `{"x":1}`)},
			[]*kgo.Record{rec(0, "1", `{"x":1}`), rec(0, "2", `{"x":1}`)},
			Verdict{OnlyA: 1, OnlyB: 1}},
		{"table compares last values only", Table,
			[]*kgo.Record{rec(0, "w1", `{"n":1}`), rec(0, "w1", `{"n":3}`), rec(1, "w2", `{"n":5}`)},
			[]*kgo.Record{rec(0, "w1", `{"n":3}`), rec(1, "w2", `{"n":4}`), rec(1, "w2", `{"n":5}`)},
			Verdict{Equal: true}},
		{"table differences", Table,
			[]*kgo.Record{rec(0, "w1", `{"n":1}`), rec(0, "w2", `{"n":2}`), rec(0, "w3", `{"n":3}`)},
			[]*kgo.Record{rec(0, "w1", `{"n":9}`), rec(0, "w2", `{"n":2}`), rec(0, "w4", `{"n":4}`)},
			Verdict{OnlyA: 1, OnlyB: 1, Differ: 1, Examples: []string{"w1", "w3", "w4"}}},
		{"table tombstone deletes", Table,
			[]*kgo.Record{rec(0, "w1", `{"n":1}`), rec(0, "w1", "")},
			nil,
			Verdict{Equal: true}},
		{"table key in two partitions", Table,
			[]*kgo.Record{rec(0, "w1", `{"n":1}`), rec(1, "w1", `{"n":1}`)},
			[]*kgo.Record{rec(0, "w1", `{"n":1}`)},
			Verdict{Split: 1, Examples: []string{"w1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := summary(t, tc.kind, tc.a...), summary(t, tc.kind, tc.b...)
			v, err := Compare(a, b)
			if err != nil {
				t.Fatal(err)
			}
			got := Verdict{Equal: v.Equal, OnlyA: v.OnlyA, OnlyB: v.OnlyB, Differ: v.Differ, Split: v.Split, Examples: v.Examples}
			if !equalVerdicts(got, tc.want) {
				t.Errorf("Compare = %+v, want %+v", got, tc.want)
			}
			// Swapping the sides swaps only the one-sided counts.
			w, err := Compare(b, a)
			if err != nil {
				t.Fatal(err)
			}
			if w.Equal != v.Equal || w.OnlyA != v.OnlyB || w.OnlyB != v.OnlyA || w.Differ != v.Differ || w.Split != v.Split {
				t.Errorf("Compare(b, a) = %+v, not the mirror of %+v", w, v)
			}
		})
	}
	if _, err := Compare(NewSummary("a", Stream), NewSummary("b", Table)); !errors.Is(err, ErrConfig) {
		t.Errorf("comparing kinds = %v, want ErrConfig", err)
	}
}

func equalVerdicts(a, b Verdict) bool {
	if len(a.Examples) != len(b.Examples) {
		return false
	}
	for i := range a.Examples {
		if a.Examples[i] != b.Examples[i] {
			return false
		}
	}
	a.Examples, b.Examples = nil, nil
	return a.Kind == b.Kind && a.Equal == b.Equal && a.OnlyA == b.OnlyA && a.OnlyB == b.OnlyB &&
		a.Differ == b.Differ && a.Split == b.Split
}

func TestKindOf(t *testing.T) {
	for q, want := range map[string]Kind{"q0": Stream, "q3": Stream, "q20": Stream, "q5": Table, "q18": Table} {
		if got, err := KindOf(q); err != nil || got != want {
			t.Errorf("KindOf(%s) = %v, %v; want %v", q, got, err, want)
		}
	}
	if _, err := KindOf("q4"); !errors.Is(err, ErrConfig) {
		t.Errorf("KindOf(q4) = %v, want ErrConfig", err)
	}
}
