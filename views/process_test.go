package views

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tarnhq/tarn/state"
	"github.com/twmb/franz-go/pkg/kgo"
)

// countingProcessor counts each key's trades in a store and emits the running count; a trade
// with a negative quantity is dead-lettered; Flush emits the batch's total under key "batch".
func countingProcessor() Processor[trade, int64] {
	return Processor[trade, int64]{
		Stores: []StoreDecl{KVStore("counts")},
		Record: func(pc *ProcessContext[int64], key string, v trade, ts time.Time) error {
			if v.Qty < 0 {
				pc.DeadLetter("negative", "quantity "+strconv.Itoa(v.Qty))
				return nil
			}
			kv := pc.KV("counts")
			n := int64(0)
			if raw, ok, err := kv.Get([]byte(key)); err != nil {
				return err
			} else if ok {
				n = int64(binary.BigEndian.Uint64(raw))
			}
			n++
			if err := kv.Set([]byte(key), binary.BigEndian.AppendUint64(nil, uint64(n))); err != nil {
				return err
			}
			// Local state is shared by the tasks, which run in parallel.
			Local(pc, "total", func() *atomic.Int64 { return new(atomic.Int64) }).Add(1)
			return pc.Emit(key, n, ts)
		},
		Flush: func(pc *ProcessContext[int64]) error {
			n := Local(pc, "total", func() *atomic.Int64 { return new(atomic.Int64) }).Swap(0)
			if n == 0 {
				return nil
			}
			return pc.Emit("batch", n, time.UnixMilli(0))
		},
	}
}

func TestProcessStoresEmitFlushDeadLetter(t *testing.T) {
	v, err := Define("process", func(b *Builder) {
		Process(Source(b, "trades", JSON[trade]()), "count", countingProcessor()).To("counts", JSON[int64]())
	})
	must(t, err)
	d := newDriver(v, 1)
	for i, q := range []int{1, 2, -1, 3, 4} {
		key := []string{"a", "b"}[i%2]
		must(t, d.input(jsonRecord("trades", key, int64(i), trade{Symbol: key, Qty: q})))
	}
	must(t, d.flush())
	must(t, d.input(jsonRecord("trades", "a", 9, trade{Symbol: "a", Qty: 5})))
	must(t, d.flush())
	got := d.dump()
	want := strings.Join([]string{
		"out counts a 1", "out counts b 1", "out counts b 2", "out counts a 2", "out counts batch 4",
		"out counts a 3", "out counts batch 1",
		"dlq negative step=count trades/0@2 key=a: quantity -1", ""}, "\n")
	if got != want {
		t.Errorf("driver output:\n%s\nwant:\n%s", got, want)
	}
}

func TestProcessUndeclaredStoreFails(t *testing.T) {
	v, err := Define("undeclared", func(b *Builder) {
		Process(Source(b, "trades", JSON[trade]()), "p", Processor[trade, int]{
			Record: func(pc *ProcessContext[int], key string, _ trade, _ time.Time) error {
				_, _, err := pc.KV("nope").Get([]byte(key))
				return err
			},
		}).To("out", JSON[int]())
	})
	must(t, err)
	d := newDriver(v, 1)
	err = d.input(jsonRecord("trades", "a", 0, trade{}))
	if err == nil || !strings.Contains(err.Error(), `no store "nope"`) {
		t.Errorf("reading an undeclared store: %v", err)
	}
}

func TestProcessDefinitionErrors(t *testing.T) {
	_, err := Define("bad", func(b *Builder) {
		s := Source(b, "trades", JSON[trade]())
		rekeyed := SelectKey(s, "rekey", func(_ string, t trade) string { return t.Symbol })
		NewCoTable(rekeyed, "tbl", TopicTable("t"), JSON[trade]())
		NewGlobalTable(b, "glob", TopicTable("t"), JSON[trade]())
		Process(s, "p", Processor[trade, int]{}).To("out", JSON[int]())
	})
	for _, s := range []string{"repartition it with views.CoPartition", `already read by step "tbl"`, "no Record function"} {
		if err == nil || !errors.Is(err, ErrDefinition) || !strings.Contains(err.Error(), s) {
			t.Errorf("Define error %v does not say %q", err, s)
		}
	}
}

// A Process step's store survives a move to another instance: the second instance restores
// it from its changelog and the counts go on.
func TestKafkaProcessStoreRestored(t *testing.T) {
	k := newKafkaEnv(t)
	in := k.topic("trades", 2)
	out := k.app + "-counts"
	v, err := Define("process", func(b *Builder) {
		Process(Source(b, in, JSON[trade]()), "count", countingProcessor()).To(out, JSON[int64]())
	})
	must(t, err)
	send := func(from, n int) {
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			recs = append(recs, jsonRecord(in, "k"+strconv.Itoa(i%5), int64(i), trade{Qty: 1}))
		}
		k.produce(recs...)
	}
	lastCounts := func(want int) map[string]int64 {
		got := map[string]int64{}
		for _, r := range k.readAll(out, want) {
			var n int64
			must(t, json.Unmarshal(r.Value, &n))
			if string(r.Key) != "batch" {
				got[string(r.Key)] = max(got[string(r.Key)], n)
			}
		}
		return got
	}
	send(0, 50)
	stop := procRuntime(k, v)
	eventually(t, func() error {
		if c := committed(k.adm, k.app+".process.v1", in); c < 50 {
			return errors.New("first instance has not finished")
		}
		return nil
	})
	stop()
	send(50, 50)
	k.runtime(Config{Views: []*View{v}})
	eventually(t, func() error {
		got := lastCounts(100)
		for i := range 5 {
			if got["k"+strconv.Itoa(i)] != 20 {
				return errors.New("counts not there yet: " + strconv.Itoa(int(got["k"+strconv.Itoa(i)])))
			}
		}
		return nil
	})
}

// Merged topics must be co-partitioned: a view merging topics of 2 and 3 partitions refuses
// to start, naming both.
func TestKafkaMergeRefusesUnequalPartitions(t *testing.T) {
	k := newKafkaEnv(t)
	a, b2 := k.topic("a", 2), k.topic("b", 3)
	v, err := Define("merge", func(b *Builder) {
		Merge(b, "ab", FromTopic(a, JSON[trade]()), FromTopic(b2, JSON[trade]())).
			Filter("all", func(string, Either[trade, trade]) bool { return true }).
			To(k.app+"-out", JSON[Either[trade, trade]]())
	})
	must(t, err)
	db, err := state.Open(state.Config{Dir: t.TempDir(), MemoryBytes: 16 << 20, Logger: quietLog()})
	must(t, err)
	defer db.Close()
	rt, err := NewRuntime(Config{App: k.app, Brokers: k.brokers, State: db, Views: []*View{v}, Logger: quietLog()})
	must(t, err)
	err = rt.Run(t.Context())
	if !errors.Is(err, ErrCoPartition) || !strings.Contains(err.Error(), a+" has 2") || !strings.Contains(err.Error(), b2+" has 3") {
		t.Fatalf("Run = %v, want ErrCoPartition naming both topics and counts", err)
	}
}

// procRuntime runs v on a fresh state DB until the returned function stops it.
func procRuntime(k *kafkaEnv, v *View) (stop func()) {
	db, err := state.Open(state.Config{Dir: k.t.TempDir(), MemoryBytes: 16 << 20, Logger: quietLog()})
	must(k.t, err)
	rt, err := NewRuntime(Config{App: k.app, Brokers: k.brokers, State: db, Views: []*View{v}, Logger: quietLog(),
		ClientOpts: []kgo.Opt{kgo.MetadataMinAge(250 * time.Millisecond)}})
	must(k.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			k.t.Errorf("runtime: %v", err)
		}
		_ = db.Close()
	}
}
