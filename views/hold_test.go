package views

import (
	"testing"
	"time"
)

func TestHoldCut(t *testing.T) {
	at := func(o0, o1 int64) holdPos { return holdPos{sources: offsets{"in": {0: o0, 1: o1}}} }
	for _, c := range []struct {
		name string
		cut  offsets
		pos  []holdPos
		want offsets
	}{
		{"first cut: the furthest of both", nil, []holdPos{at(5, 9), at(7, 2)}, offsets{"in": {0: 7, 1: 9}}},
		{"a version past the cut raises it", offsets{"in": {0: 7, 1: 9}}, []holdPos{at(7, 9), at(8, 3)}, offsets{"in": {0: 8, 1: 9}}},
		{"never lowered", offsets{"in": {0: 7, 1: 9}}, []holdPos{at(1, 1), at(2, 2)}, offsets{"in": {0: 7, 1: 9}}},
	} {
		got := raise(c.cut, c.pos)
		if !equalCuts(got, c.want) {
			t.Errorf("%s: raise gave %v, want %v", c.name, got, c.want)
		}
	}
	if equalCuts(nil, offsets{}) || !equalCuts(offsets{}, offsets{}) {
		t.Error("no cut yet must differ from every cut")
	}
	now := time.UnixMilli(1000)
	h := &shadowHold{Cut: offsets{"in": {0: 3}}, Until: now.Add(time.Second)}
	if !h.active(now) || h.active(now.Add(time.Second)) || (*shadowHold)(nil).active(now) {
		t.Error("a hold applies until Until only")
	}
}
