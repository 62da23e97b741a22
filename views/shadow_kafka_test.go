package views

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kgo"
)

// liveIngest writes events to in (parts partitions) over the first symbols symbols until stop
// is called, which returns the count per symbol of everything it wrote (acknowledged).
func liveIngest(t *testing.T, k *kafkaEnv, in string, parts int32, from, symbols int) (stop func() map[string]float64) {
	t.Helper()
	counts := map[string]float64{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := from; ; i += 50 {
			select {
			case <-done:
				return
			default:
			}
			recs := make([]*kgo.Record, 0, 50)
			batch := map[string]float64{}
			for j := i; j < i+50; j++ {
				tr := trade{Symbol: "S" + strconv.Itoa(j%symbols), Qty: bigQty + j%10}
				r := jsonRecord(in, "e"+strconv.Itoa(j), int64(j), tr)
				r.Partition = partition.For(r.Key, parts)
				recs = append(recs, r)
				batch[tr.Symbol]++
			}
			if err := k.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Errorf("live ingest: %v", err)
				return
			}
			addTo(counts, batch)
			time.Sleep(20 * time.Millisecond)
		}
	})
	return func() map[string]float64 {
		close(done)
		wg.Wait()
		return counts
	}
}

// servedShadow waits for the switch to version and returns the shadow report it recorded.
func servedShadow(t *testing.T, rts []*Runtime, version int) *ShadowReport {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		in := rts[0].Views()[0]
		if in.Version == version && in.Shadow != nil {
			return in.Shadow
		}
		if time.Now().After(deadline) {
			t.Fatalf("no switch to version %d: %+v", version, in)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// atLeast reports the symbols where got is below want.
func atLeast(got, want map[string]float64) error {
	for k, w := range want {
		if got[k] < w {
			return fmt.Errorf("%s = %v, want at least %v", k, got[k], w)
		}
	}
	return nil
}

// An on-demand rebuild of an unchanged definition with a repartition step (GroupBy → Count),
// on two instances, while a producer keeps writing: the shadow check holds both versions at
// one cut of the input and finds no difference; the hold loses and repeats nothing (the
// counts after the switch are exact under exactly-once, at least the input at least once).
func TestKafkaShadowSame(t *testing.T) {
	for name, eos := range map[string]bool{"eos": true, "alo": false} {
		t.Run(name, func(t *testing.T) {
			k := newKafkaEnv(t)
			const parts, symbols = 4, 40
			in := k.topic("events", parts)
			counts, _ := produceEvents(k, in, 0, 20_000, symbols)
			v1, err := countView(in)
			must(t, err)
			cfg := Config{Views: []*View{v1}, ExactlyOnce: eos, Rebuild: rebuildConfig(), TransactionTimeout: 10 * time.Second}
			var rts []*Runtime
			for range 2 {
				cfg.State = openDB(t, t.TempDir())
				rt, _ := k.start(cfg)
				rts = append(rts, rt)
			}
			eventually(t, func() error { return fanOutEquals(rts, 1, counts) })

			stop := liveIngest(t, k, in, parts, 20_000, symbols)
			n, err := rts[0].Rebuild(context.Background(), rebuildView)
			must(t, err)
			sh := servedShadow(t, rts, n)
			addTo(counts, stop())
			t.Logf("shadow report: keys=%d differ=%d held=%v cut=%v err=%q", sh.Keys, sh.Differ, sh.Held, sh.Cut, sh.Err)
			if sh.Err != "" || sh.Keys == 0 || sh.Differ != 0 || len(sh.Cut[in]) != parts {
				t.Errorf("shadow report %+v, want every key compared at a cut of all %d partitions and none differing", sh, parts)
			}
			if eos {
				eventually(t, func() error { return fanOutEquals(rts, n, counts) })
				return
			}
			eventually(t, func() error {
				version, got, ok := fanOut(rts)
				if !ok || version != n {
					return fmt.Errorf("fan-out at version %d (complete %v), want %d", version, ok, n)
				}
				return atLeast(got, counts)
			})
		})
	}
}

// The hold does not hide a real difference: the serving version's changelog is given a wrong
// value for one symbol that the live input does not touch, and the shadow check of an
// unchanged definition under ingest reports exactly that key.
func TestKafkaShadowReal(t *testing.T) {
	k := newKafkaEnv(t)
	const parts, symbols = 4, 20
	in := k.topic("events", parts)
	counts, _ := produceEvents(k, in, 0, 10_000, symbols+1) // S20 is written only now
	v1, err := countView(in)
	must(t, err)
	rt, _ := k.start(Config{State: openDB(t, t.TempDir()), Views: []*View{v1}, Rebuild: rebuildConfig()})
	eventually(t, func() error { return equalValues(rt, counts) })
	changelog := topic.Changelog(k.app, rebuildView, 1, "total")
	var wrong *kgo.Record
	for _, r := range k.readEnd(changelog) {
		if string(r.Key) == "S20" {
			wrong = &kgo.Record{Topic: changelog, Partition: r.Partition, Key: r.Key, Value: []byte("123456789")}
		}
	}
	if wrong == nil {
		t.Fatal("no S20 in the changelog")
	}
	must(t, k.cl.ProduceSync(context.Background(), wrong).FirstErr())

	stop := liveIngest(t, k, in, parts, 10_000, symbols)
	n, err := rt.Rebuild(context.Background(), rebuildView)
	must(t, err)
	sh := servedShadow(t, []*Runtime{rt}, n)
	stop()
	t.Logf("shadow report: keys=%d differ=%d held=%v cut=%v examples=%v err=%q", sh.Keys, sh.Differ, sh.Held, sh.Cut, sh.Examples, sh.Err)
	if sh.Err != "" || sh.Keys != symbols+1 || sh.Differ != 1 || len(sh.Examples) != 1 || sh.Examples[0] != "S20" || len(sh.Cut) == 0 {
		t.Errorf("shadow report %+v, want %d keys compared at a cut and only S20 differing", sh, symbols+1)
	}
}

// A changed definition (counting each event twice) rebuilt under ingest reports differences;
// the old version is frozen by the code change, so no common cut exists and none is named.
func TestKafkaShadowChanged(t *testing.T) {
	k := newKafkaEnv(t)
	const parts, symbols = 4, 20
	in := k.topic("events", parts)
	counts, _ := produceEvents(k, in, 0, 10_000, symbols)
	db := openDB(t, t.TempDir())
	v1, err := countView(in)
	must(t, err)
	rt, stopRT := k.start(Config{State: db, Views: []*View{v1}, Rebuild: rebuildConfig()})
	eventually(t, func() error { return equalValues(rt, counts) })
	stopRT()

	stop := liveIngest(t, k, in, parts, 10_000, symbols)
	double, err := sumViewOf(in, func(trade) float64 { return 2 })
	must(t, err)
	rt, _ = k.start(Config{State: db, Views: []*View{double}, Rebuild: rebuildConfig()})
	sh := servedShadow(t, []*Runtime{rt}, 2)
	addTo(counts, stop())
	t.Logf("shadow report: keys=%d differ=%d held=%v cut=%v err=%q", sh.Keys, sh.Differ, sh.Held, sh.Cut, sh.Err)
	if sh.Err != "" || sh.Keys != symbols || sh.Differ != symbols || sh.Cut != nil {
		t.Errorf("shadow report %+v, want all %d keys differing and no cut", sh, symbols)
	}
	for s, c := range counts {
		counts[s] = 2 * c
	}
	eventually(t, func() error { return equalValues(rt, counts) })
}

// A hold that cannot finish in time (Rebuild.ShadowHold shorter than one look at the
// positions) is released: the report says so and names no cut, the switch goes ahead, the
// versions record keeps no hold, and the held input is processed once (exactly once).
func TestKafkaShadowHoldTimeout(t *testing.T) {
	k := newKafkaEnv(t)
	const parts, symbols = 4, 20
	in := k.topic("events", parts)
	counts, _ := produceEvents(k, in, 0, 10_000, symbols)
	v1, err := countView(in)
	must(t, err)
	cfg := rebuildConfig()
	cfg.ShadowHold = shadowSettle / 2
	rt, _ := k.start(Config{State: openDB(t, t.TempDir()), Views: []*View{v1}, Rebuild: cfg, ExactlyOnce: true,
		TransactionTimeout: 10 * time.Second})
	eventually(t, func() error { return equalValues(rt, counts) })
	stop := liveIngest(t, k, in, parts, 10_000, symbols)
	n, err := rt.Rebuild(context.Background(), rebuildView)
	must(t, err)
	sh := servedShadow(t, []*Runtime{rt}, n)
	addTo(counts, stop())
	t.Logf("shadow report: keys=%d differ=%d held=%v cut=%v err=%q", sh.Keys, sh.Differ, sh.Held, sh.Cut, sh.Err)
	if !strings.Contains(sh.Err, "Rebuild.ShadowHold") || sh.Cut != nil {
		t.Errorf("shadow report %+v, want an error saying the versions were not held at one cut", sh)
	}
	latest, err := readLatest(context.Background(), []kgo.Opt{kgo.SeedBrokers(k.brokers...)}, topic.Versions(k.app), -1, nil)
	must(t, err)
	var rec versionsRecord
	must(t, json.Unmarshal(latest[rebuildView], &rec))
	if rec.Hold != nil || rec.Serving.Version != n {
		t.Errorf("the versions record serves v%d and keeps the hold %+v", rec.Serving.Version, rec.Hold)
	}
	eventually(t, func() error { return equalValues(rt, counts) })
}
