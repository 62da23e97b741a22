package serve

import (
	"errors"
	"maps"
	"testing"
)

func TestParseMinOffsets(t *testing.T) {
	for _, tc := range []struct {
		in     string
		pos    map[int32]int64
		inputs InputOffsets
		bad    bool
	}{
		{in: "0:41,3:7", pos: map[int32]int64{0: 42, 3: 8}},
		{in: "trades:3:1041", inputs: InputOffsets{"trades": {3: 1042}}},
		{in: "trades:3:1041,trades:0:0,orders.v2_x-y:1:5", inputs: InputOffsets{"trades": {3: 1042, 0: 1}, "orders.v2_x-y": {1: 6}}},
		{in: "2:9,trades:2:9", pos: map[int32]int64{2: 10}, inputs: InputOffsets{"trades": {2: 10}}},
		{in: "", bad: true},
		{in: "0", bad: true},
		{in: "a:b:c:d", bad: true},
		{in: "0:1,0:2", bad: true},
		{in: "trades:0:1,trades:0:2", bad: true},
		{in: ":0:1", bad: true},
		{in: "bad topic:0:1", bad: true},
		{in: "..:0:1", bad: true},
		{in: "trades:-1:1", bad: true},
		{in: "trades:0:9223372036854775807", bad: true},
		{in: "trades:0:x", bad: true},
		{in: "trades:0:1,", bad: true},
	} {
		pos, inputs, err := ParseMinOffsets(tc.in)
		if tc.bad {
			if !errors.Is(err, ErrBadPosition) {
				t.Errorf("%q: error %v, want ErrBadPosition", tc.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if !maps.Equal(pos.Offsets, tc.pos) || !maps.EqualFunc(inputs, tc.inputs, maps.Equal) {
			t.Errorf("%q: got %v and %v, want %v and %v", tc.in, pos.Offsets, inputs, tc.pos, tc.inputs)
		}
	}
}

func TestPositionJoinAndMerge(t *testing.T) {
	a := Position{Offsets: map[int32]int64{0: 5}, LSN: 10}
	b := Position{Offsets: map[int32]int64{1: 7}, LSN: 20}
	for _, tc := range []struct {
		name string
		got  Position
		lsn  LSN
	}{
		{"merge: one set seen later", a.Merge(b), 20},
		{"join: two sets, each vouching for its own", a.Join(b), 10},
		{"join with a set without an LSN", a.Join(Position{Offsets: map[int32]int64{1: 1}}), 0},
	} {
		if tc.got.LSN != tc.lsn || len(tc.got.Offsets) != 2 {
			t.Errorf("%s: %+v, want LSN %s over two partitions", tc.name, tc.got, tc.lsn)
		}
	}
}
