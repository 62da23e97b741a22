package views

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDefineRefusesBadDefinitions(t *testing.T) {
	windowed := func(w Windows) func(b *Builder) {
		return func(b *Builder) {
			s := Source(b, "trades", JSON[trade]())
			CountWindows(WindowBy(GroupByKey(s), w), "counts").Serve()
		}
	}
	cases := []struct {
		name, view string
		build      func(b *Builder)
		want       []string
	}{
		{"negative size", "v1", windowed(Tumbling(-time.Second).Grace(0)),
			[]string{`view "v1" step "counts": tumbling window size -1s must be positive`}},
		{"missing grace", "v2", windowed(Hopping(time.Minute, time.Second)),
			[]string{`view "v2" step "counts": hopping window has no grace period; call Grace(d)`}},
		{"negative grace", "v3", windowed(Session(time.Second).Grace(-time.Second)),
			[]string{`view "v3" step "counts": grace period -1s is negative`}},
		{"advance beyond size", "v4", windowed(Hopping(time.Second, time.Minute).Grace(0)),
			[]string{`advance 1m0s must be positive and at most the size 1s`}},
		{"duplicate step", "v5", func(b *Builder) {
			s := Source(b, "trades", JSON[trade]())
			s.Filter("x", func(string, trade) bool { return true }).Filter("x", func(string, trade) bool { return true }).
				To("out", JSON[trade]())
		}, []string{`view "v5" step "x": filter: step name already used by a filter`}},
		{"table aggregate without subtract", "v6", func(b *Builder) {
			g := GroupTable(CDCTable[order](b, "public", "orders"), "by-region", func(_ string, o order) string { return o.Region })
			AggregateTable(g, "max", MaxOf(func(o order) float64 { return o.Amount })).Serve()
		}, []string{`view "v6" step "max": aggregator "max" has no Subtract`}},
		{"session without merge", "v7", func(b *Builder) {
			s := Source(b, "trades", JSON[trade]())
			agg := CountOf[trade]()
			agg.Merge = nil
			AggregateWindows(WindowBy(GroupByKey(s), Session(time.Second).Grace(0)), "n", agg).Serve()
		}, []string{`view "v7" step "n": aggregator "count" has no Merge`}},
		{"no sink", "v8", func(b *Builder) { Source(b, "trades", JSON[trade]()) },
			[]string{`view "v8": no sink`}},
		{"bad name", "a.b", func(b *Builder) { Source(b, "t", JSON[trade]()).To("o", JSON[trade]()) },
			[]string{`view name "a.b" has '.'`}},
		{"served twice", "v9", func(b *Builder) {
			tb := CDCTable[order](b, "public", "orders")
			tb.Serve()
			tb.Serve()
		}, []string{`view "v9" step "cdc-public-orders": Serve called twice`}},
		{"all problems at once", "v10", func(b *Builder) {
			s := Source(b, "trades", JSON[trade]())
			CountWindows(WindowBy(GroupByKey(s), Tumbling(0)), "a").Serve()
			CountWindows(WindowBy(GroupByKey(s), Tumbling(time.Second).Grace(-1)), "a")
		}, []string{"size 0s must be positive", "no grace period", "grace period -1ns is negative", `step "a": aggregate: step name already used`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := Define(c.view, c.build)
			if err == nil {
				t.Fatalf("Define succeeded with graph %q", v.Graph())
			}
			if !errors.Is(err, ErrDefinition) {
				t.Errorf("error %v does not wrap ErrDefinition", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	define := func(step string, grace time.Duration, opts ...Option) string {
		v, err := Define("counts", func(b *Builder) {
			s := Source(b, "trades", JSON[trade]())
			CountWindows(WindowBy(GroupBy(s, step, bySymbol), Tumbling(time.Minute).Grace(grace)), "n").Serve()
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return v.Fingerprint()
	}
	base := define("by-symbol", time.Second)
	if again := define("by-symbol", time.Second); again != base {
		t.Errorf("same definition, fingerprints %s and %s", base, again)
	}
	for name, other := range map[string]string{
		"renamed step":  define("by-sym", time.Second),
		"changed grace": define("by-symbol", 2*time.Second),
		"new version":   define("by-symbol", time.Second, Version(2)),
	} {
		if other == base {
			t.Errorf("%s: fingerprint unchanged", name)
		}
	}
}
