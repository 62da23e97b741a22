package views

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaChangeFeedResume subscribes from a position in the middle of the served changelog:
// the feed must replay exactly the changes after it, partition by partition, and then deliver
// live changes. This is what a watcher reconnecting with its last position relies on.
func TestKafkaChangeFeedResume(t *testing.T) {
	k := newKafkaEnv(t)
	in := k.topic("events", 3)
	v, err := Define("count", func(b *Builder) {
		Count(GroupByKey(Source(b, in, JSON[trade]())), "count").Serve()
	})
	must(t, err)
	const keys = 900
	for round := 0; round < 2; round++ {
		for i := range keys {
			k.produce(jsonRecord(in, fmt.Sprintf("k%d", i), int64(round*keys+i), trade{Symbol: "x", Qty: 1}))
		}
	}
	// Small fetches make the replay take many fetches per partition, as a long one does.
	rt := k.runtime(Config{Views: []*View{v}, ClientOpts: []kgo.Opt{kgo.FetchMaxBytes(16 << 10), kgo.FetchMaxPartitionBytes(8 << 10)}})
	var ends Position
	eventually(t, func() error {
		for i := range keys {
			raw, _, err := rt.Get(context.Background(), "count", fmt.Sprintf("k%d", i))
			if err != nil {
				return err
			}
			if string(raw) != "2" {
				return fmt.Errorf("k%d = %s", i, raw)
			}
		}
		ends = rt.Views()[0].Positions
		if len(ends) != 3 {
			return fmt.Errorf("positions %v", ends)
		}
		return nil
	})

	// Resume from the middle of every partition's changelog.
	after := Position{}
	want := 0
	for p, end := range ends {
		after[p] = end / 2
		want += int(end - end/2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := rt.Subscribe(ctx, "count", after, 100000)
	must(t, err)
	defer sub.Close()
	next := map[int32]int64{}
	for p, off := range after {
		next[p] = off + 1
	}
	got := 0
	for got < want {
		select {
		case c, ok := <-sub.C:
			if !ok {
				t.Fatalf("feed ended after %d of %d replayed changes: %v", got, want, sub.Err())
			}
			if c.Offset != next[c.Partition] {
				t.Fatalf("partition %d: change at offset %d, want %d (nothing skipped, nothing twice)", c.Partition, c.Offset, next[c.Partition])
			}
			next[c.Partition]++
			got++
		case <-ctx.Done():
			t.Fatalf("replayed %d of %d changes before the deadline", got, want)
		}
	}
	for p, end := range ends {
		if next[p] != end+1 {
			t.Errorf("partition %d replayed to %d, want %d", p, next[p]-1, end)
		}
	}

	// Then live changes.
	k.produce(jsonRecord(in, "live", int64(3*keys), trade{Symbol: "x", Qty: 1}))
	for {
		select {
		case c, ok := <-sub.C:
			if !ok {
				t.Fatalf("feed ended before the live change: %v", sub.Err())
			}
			if c.Key == "live" {
				if string(c.Value) != "1" {
					t.Fatalf("live change = %s, want 1", c.Value)
				}
				return
			}
		case <-ctx.Done():
			t.Fatal("no live change before the deadline")
		}
	}
}

// TestKafkaLiveChangesHaveTheirOwnOffsets: live changes carry the offset of their own
// changelog record, rising strictly per partition (one change per key and batch, as the
// changelog has), and resuming after any of them replays exactly the live changes that came
// after it.
func TestKafkaLiveChangesHaveTheirOwnOffsets(t *testing.T) {
	k := newKafkaEnv(t)
	in := k.topic("events", 3)
	v, err := Define("count", func(b *Builder) {
		Count(GroupByKey(Source(b, in, JSON[trade]())), "count").Serve()
	})
	must(t, err)
	rt := k.runtime(Config{Views: []*View{v}})
	k.produce(jsonRecord(in, "warm", 0, trade{Symbol: "x", Qty: 1}))
	eventually(t, func() error {
		_, _, err := rt.Get(context.Background(), "count", "warm")
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	live, err := rt.Subscribe(ctx, "count", rt.Views()[0].Positions, 100000)
	must(t, err)
	defer live.Close()
	const keys, rounds = 30, 10 // each key several times in one batch
	var rs []*kgo.Record
	for r := range rounds {
		for i := range keys {
			rs = append(rs, jsonRecord(in, fmt.Sprintf("k%d", i), int64(1+r*keys+i), trade{Symbol: "x", Qty: 1}))
		}
	}
	k.produce(rs...)
	var got []Change
	final := map[string]string{}
	for len(final) < keys || countDone(final, rounds) < keys {
		select {
		case c := <-live.C:
			got = append(got, c)
			final[c.Key] = string(c.Value)
		case <-ctx.Done():
			t.Fatalf("live changes before the deadline: %d", len(got))
		}
	}
	last := map[int32]int64{}
	for _, c := range got {
		if prev, ok := last[c.Partition]; ok && c.Offset <= prev {
			t.Fatalf("partition %d: live change at offset %d after one at %d; offsets must rise strictly", c.Partition, c.Offset, prev)
		}
		last[c.Partition] = c.Offset
	}
	// Resume after the first live change of each partition: the replay equals the rest.
	after := Position{}
	var want []Change
	for _, c := range got {
		if _, ok := after[c.Partition]; !ok {
			after[c.Partition] = c.Offset
			continue
		}
		want = append(want, c)
	}
	replay, err := rt.Subscribe(ctx, "count", after, 100000)
	must(t, err)
	defer replay.Close()
	for i := range want {
		select {
		case c := <-replay.C:
			// Replayed changes arrive partition by partition; each must be a live one.
			if c.Offset <= after[c.Partition] {
				t.Fatalf("replay delivered offset %d at or before the resume point %d", c.Offset, after[c.Partition])
			}
			if string(c.Value) != valueAt(want, c.Partition, c.Offset) {
				t.Fatalf("replayed %s@%d/%d = %s, live said %s", c.Key, c.Partition, c.Offset, c.Value, valueAt(want, c.Partition, c.Offset))
			}
		case <-ctx.Done():
			t.Fatalf("replayed %d of %d changes before the deadline", i, len(want))
		}
	}
	t.Logf("%d live changes of %d keys, offsets rising strictly; resume replayed the %d after the first of each partition", len(got), keys, len(want))
}

func countDone(final map[string]string, rounds int) int {
	n := 0
	for _, v := range final {
		if v == fmt.Sprint(rounds) {
			n++
		}
	}
	return n
}

// valueAt is the value of the live change at partition p and offset off ("<none>" if none).
func valueAt(cs []Change, p int32, off int64) string {
	for _, c := range cs {
		if c.Partition == p && c.Offset == off {
			return string(c.Value)
		}
	}
	return "<none>"
}
