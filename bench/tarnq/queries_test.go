package tarnq

import (
	"errors"
	"testing"

	"github.com/tarnhq/tarn/bench/nexmark"
)

func TestDefine(t *testing.T) {
	topics := nexmark.Topics{Person: "p", Auction: "a", Bid: "b"}
	for _, q := range []string{"q0", "q1", "q2"} {
		v, err := Define(q, topics, "out")
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if v.Queryable() {
			t.Errorf("%s is served; the benchmark wants only its output topic", q)
		}
		if in, err := Inputs(q, topics); err != nil || len(in) != 1 || in[0] != "b" {
			t.Errorf("%s reads %v, %v; want the bid topic", q, in, err)
		}
	}
	for _, q := range []string{"q3", "q5", "q99"} {
		if _, err := Define(q, topics, "out"); !errors.Is(err, ErrNotImplemented) {
			t.Errorf("Define(%s) = %v, want ErrNotImplemented", q, err)
		}
	}
}
