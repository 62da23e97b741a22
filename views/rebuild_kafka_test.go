package views

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/tarnhq/tarn/state"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The rebuild tests change a count per symbol into a sum of quantities per symbol: the step
// names stay, the aggregator changes, so the fingerprint does and the runtime rebuilds.
const rebuildView = "totals"

func countView(in string) (*View, error) {
	return Define(rebuildView, func(b *Builder) {
		Count(GroupBy(Source(b, in, JSON[trade]()), "by-symbol", bySymbol), "total").Serve()
	})
}

func sumView(in string) (*View, error) {
	return sumViewOf(in, func(t trade) float64 { return float64(t.Qty) })
}

func sumViewOf(in string, qty func(trade) float64) (*View, error) {
	return Define(rebuildView, func(b *Builder) {
		Aggregate(GroupBy(Source(b, in, JSON[trade]()), "by-symbol", bySymbol), "total", SumOf(qty)).Serve()
	})
}

// bigQty is the smallest quantity: a sum is then at least bigQty times a count, so a value
// tells which version it came from.
const bigQty = 1000

// produceEvents writes n events over symbols and returns the count and the sum per symbol.
func produceEvents(k *kafkaEnv, in string, from, n, symbols int) (counts, sums map[string]float64) {
	counts, sums = map[string]float64{}, map[string]float64{}
	recs := make([]*kgo.Record, 0, n)
	for i := from; i < from+n; i++ {
		tr := trade{Symbol: "S" + strconv.Itoa(i%symbols), Qty: bigQty + i%10}
		counts[tr.Symbol]++
		sums[tr.Symbol] += float64(tr.Qty)
		recs = append(recs, jsonRecord(in, "e"+strconv.Itoa(i), int64(i), tr))
	}
	k.produce(recs...)
	return counts, sums
}

func addTo(dst, src map[string]float64) {
	for k, v := range src {
		dst[k] += v
	}
}

// start runs a runtime until the returned stop is called (or the test ends).
func (k *kafkaEnv) start(cfg Config) (*Runtime, func()) {
	k.t.Helper()
	cfg.App, cfg.Brokers = k.app, k.brokers
	cfg.ClientOpts = append(cfg.ClientOpts, kgo.MetadataMinAge(250*time.Millisecond))
	if cfg.Logger == nil {
		cfg.Logger = quietLog()
	}
	rt, err := NewRuntime(cfg)
	must(k.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			k.t.Errorf("runtime: %v", err)
		}
	}
	k.t.Cleanup(stop)
	return rt, stop
}

func openDB(t testing.TB, dir string) *state.DB {
	db, err := state.Open(state.Config{Dir: dir, MemoryBytes: 64 << 20, Logger: quietLog()})
	must(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// values reads every symbol from rt's serving version.
func values(rt *Runtime, want map[string]float64) (map[string]float64, error) {
	got := map[string]float64{}
	for sym := range want {
		raw, _, err := rt.Get(context.Background(), rebuildView, sym)
		if err != nil {
			return nil, err
		}
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil {
			return nil, err
		}
		got[sym] = f
	}
	return got, nil
}

func equalValues(rt *Runtime, want map[string]float64) error {
	got, err := values(rt, want)
	if err != nil {
		return err
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("view differs: %v", diff(got, want))
	}
	return nil
}

func servingIs(rt *Runtime, version int) error {
	if v, err := rt.Serving(rebuildView); err != nil || v != version {
		return fmt.Errorf("serving version %d (%v), want %d", v, err, version)
	}
	return nil
}

func rebuildConfig() RebuildConfig {
	return RebuildConfig{CheckInterval: 200 * time.Millisecond, SwitchLag: 100, ShadowKeys: -1, DeleteAfter: 3 * time.Second}
}

// A count at v1 over 200k events becomes a sum: v1 answers queries during the rebuild, then
// every key equals the sum computed here, the shadow check saw every key differ, and v1's
// topics, group and local stores are gone after the delay.
func TestKafkaRebuildCountToSum(t *testing.T) {
	k := newKafkaEnv(t)
	in := k.topic("events", 4)
	const n, symbols = 200_000, 100
	counts, sums := produceEvents(k, in, 0, n, symbols)
	db := openDB(t, t.TempDir())
	v1, err := countView(in)
	must(t, err)
	rt, stop := k.start(Config{State: db, Views: []*View{v1}, Rebuild: rebuildConfig()})
	eventually(t, func() error { return equalValues(rt, counts) })
	stop()

	v2, err := sumView(in)
	must(t, err)
	cfg := rebuildConfig()
	cfg.RecordsPerSecond = 150_000 // 400k records (input and repartition): a few seconds
	rt, _ = k.start(Config{State: db, Views: []*View{v2}, Rebuild: cfg})
	during := 0
	eventually(t, func() error {
		info := rt.Views()[0]
		if info.Version == 2 {
			return nil
		}
		if info.Rebuild == nil || info.Rebuild.State != StateRebuilding {
			return errNotYet
		}
		if !info.Frozen {
			t.Fatalf("v1 processes during a rebuild after a code change: %+v", info)
		}
		if err := equalValues(rt, counts); err != nil {
			var notOwner *NotOwnerError
			if errors.Is(err, ErrRestoring) || errors.As(err, &notOwner) { // still joining its group
				return errNotYet
			}
			if rt.Views()[0].Version == 2 { // switched between the two reads
				return nil
			}
			t.Fatalf("during the rebuild (lag %d, eta %v): %v", info.Rebuild.TotalLag, info.Rebuild.ETA, err)
		}
		during++
		return errNotYet
	})
	if during == 0 {
		t.Fatal("no query ran while the rebuild ran")
	}
	eventually(t, func() error { return equalValues(rt, sums) })
	info := rt.Views()[0]
	if sh := info.Shadow; sh == nil || sh.Old != 1 || sh.New != 2 || sh.Keys != symbols || sh.Differ != symbols {
		t.Errorf("shadow report %+v, want all %d keys compared and differing", sh, symbols)
	}
	t.Logf("queries answered from v1 %d times during the rebuild; shadow %+v", during, info.Shadow)

	prefix := topic.ViewPrefix(k.app, rebuildView, 1)
	eventually(t, func() error {
		all, err := k.adm.ListTopics(context.Background())
		if err != nil {
			return err
		}
		for _, name := range all.Names() {
			if strings.HasPrefix(name, prefix) {
				return fmt.Errorf("topic %s of v1 still exists", name)
			}
		}
		return nil
	})
	kv, err := db.KV(state.ID{App: k.app, View: rebuildView, Version: 1, Store: "total", Partition: 0})
	must(t, err)
	it, err := kv.Range(db, nil, nil)
	must(t, err)
	if it.Next() {
		t.Errorf("v1's local store still holds %q", it.Key())
	}
	must(t, it.Close())
}

// Bad new code (a panic on some records) fails its rebuild: v1 keeps serving, Info says why.
func TestKafkaRebuildFailure(t *testing.T) {
	k := newKafkaEnv(t)
	in := k.topic("events", 2)
	counts, _ := produceEvents(k, in, 0, 5000, 20)
	db := openDB(t, t.TempDir())
	v1, err := countView(in)
	must(t, err)
	rt, stop := k.start(Config{State: db, Views: []*View{v1}, Rebuild: rebuildConfig()})
	eventually(t, func() error { return equalValues(rt, counts) })
	stop()
	bad, err := sumViewOf(in, func(t trade) float64 {
		if t.Qty == bigQty+7 {
			panic("bad new code")
		}
		return float64(t.Qty)
	})
	must(t, err)
	rt, _ = k.start(Config{State: db, Views: []*View{bad}, Rebuild: rebuildConfig()})
	eventually(t, func() error {
		in := rt.Views()[0]
		if in.Rebuild == nil || in.Rebuild.State != StateFailed {
			return fmt.Errorf("rebuild %+v, want failed", in.Rebuild)
		}
		if !strings.Contains(in.Rebuild.Reason, "bad new code") {
			t.Errorf("failure reason %q does not say why", in.Rebuild.Reason)
		}
		return nil
	})
	must(t, servingIs(rt, 1))
	eventually(t, func() error { return equalValues(rt, counts) })
}

// An on-demand rebuild of an unchanged definition: v1 keeps processing meanwhile, v2 takes
// over with the same results, and Rollback makes v1 (still up to date) serve again.
func TestKafkaRebuildOnDemandAndRollback(t *testing.T) {
	k := newKafkaEnv(t)
	in := k.topic("events", 2)
	counts, _ := produceEvents(k, in, 0, 20_000, 20)
	v1, err := countView(in)
	must(t, err)
	cfg := rebuildConfig()
	cfg.RecordsPerSecond, cfg.DeleteAfter = 10_000, time.Minute
	rt, _ := k.start(Config{State: openDB(t, t.TempDir()), Views: []*View{v1}, Rebuild: cfg})
	eventually(t, func() error { return equalValues(rt, counts) })
	ctx := context.Background()
	n, err := rt.Rebuild(ctx, rebuildView)
	must(t, err)
	if n != 2 {
		t.Fatalf("Rebuild gave version %d, want 2", n)
	}
	if _, err := rt.Rebuild(ctx, rebuildView); !errors.Is(err, ErrRebuilding) {
		t.Errorf("second Rebuild: %v, want ErrRebuilding", err)
	}
	more, _ := produceEvents(k, in, 20_000, 2000, 20)
	addTo(counts, more)
	eventually(t, func() error { // v1 processes new input while v2 rebuilds
		p, err := rt.Pin(rebuildView, 1)
		if err != nil {
			return err
		}
		return equalPinned(p, counts)
	})
	eventually(t, func() error { return servingIs(rt, 2) })
	eventually(t, func() error { return equalValues(rt, counts) })
	back, err := rt.Rollback(ctx, rebuildView)
	must(t, err)
	if back != 1 {
		t.Fatalf("Rollback serves version %d, want 1", back)
	}
	eventually(t, func() error { return servingIs(rt, 1) })
	must(t, equalValues(rt, counts))
	if rb := rt.Views()[0].Rebuild; rb == nil || rb.Version != 2 || rb.State != StateRolledBack {
		t.Errorf("after rollback, rebuild info %+v", rb)
	}
}

func equalPinned(p Pinned, want map[string]float64) error {
	got := map[string]float64{}
	for sym := range want {
		raw, _, err := p.Get(context.Background(), sym)
		if err != nil {
			return err
		}
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil {
			return err
		}
		got[sym] = f
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("version %d differs: %v", p.Version(), diff(got, want))
	}
	return nil
}

// Two instances rebuild together and switch together: a scan fanned out over both, pinned to
// the coordinator's serving version, never sees some partitions at v1 and others at v2.
func TestKafkaRebuildTwoInstances(t *testing.T) {
	k := newKafkaEnv(t)
	in := k.topic("events", 4)
	const symbols = 60
	counts, sums := produceEvents(k, in, 0, 60_000, symbols)
	dbs := []*state.DB{openDB(t, t.TempDir()), openDB(t, t.TempDir())}
	v1, err := countView(in)
	must(t, err)
	var stops []func()
	var rts []*Runtime
	for _, db := range dbs {
		rt, stop := k.start(Config{State: db, Views: []*View{v1}, Rebuild: rebuildConfig()})
		rts, stops = append(rts, rt), append(stops, stop)
	}
	eventually(t, func() error { return fanOutEquals(rts, 1, counts) })
	for _, stop := range stops {
		stop()
	}
	v2, err := sumView(in)
	must(t, err)
	cfg := rebuildConfig()
	cfg.RecordsPerSecond = 20_000 // per instance: 120k records take a few seconds
	rts = nil
	for _, db := range dbs {
		rt, _ := k.start(Config{State: db, Views: []*View{v2}, Rebuild: cfg})
		rts = append(rts, rt)
	}
	seen := map[int]int{}
	deadline := time.Now().Add(2 * time.Minute)
	for seen[2] < 100 || servingIs(rts[1], 2) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("no switch: complete fan-outs per version %v", seen)
		}
		time.Sleep(time.Millisecond)
		version, entries, ok := fanOut(rts)
		if !ok {
			continue
		}
		kinds := map[string]int{}
		for sym, v := range entries {
			switch {
			case v == counts[sym]:
				kinds["v1"]++
			case v >= bigQty:
				kinds["v2"]++
			default:
				t.Fatalf("version %d: %s = %v is neither its count nor a sum", version, sym, v)
			}
		}
		if len(kinds) != 1 || (version == 1) != (kinds["v1"] > 0) {
			t.Fatalf("a scan pinned to version %d saw a mix: %v", version, kinds)
		}
		seen[version]++
	}
	if seen[1] == 0 {
		t.Errorf("no complete scan at v1 during the rebuild: %v", seen)
	}
	t.Logf("complete pinned scans per version: %v", seen)
	eventually(t, func() error { return fanOutEquals(rts, 2, sums) })
}

// fanOut scans every instance at the first instance's serving version; ok is false when the
// version is not readable everywhere or some partition is not covered (moving, restoring).
func fanOut(rts []*Runtime) (int, map[string]float64, bool) {
	version, err := rts[0].Serving(rebuildView)
	if err != nil {
		return 0, nil, false
	}
	all := map[string]float64{}
	parts := map[int32]bool{}
	var n int32
	for _, rt := range rts {
		p, err := rt.Pin(rebuildView, version)
		if err != nil {
			return 0, nil, false
		}
		entries, pos, err := p.Scan(ScanRange{})
		if err != nil {
			return 0, nil, false
		}
		for part := range pos {
			parts[part] = true
		}
		n = p.Partitions()
		for _, e := range entries {
			var f float64
			if json.Unmarshal(e.Value, &f) != nil {
				return 0, nil, false
			}
			all[e.Key] = f
		}
	}
	return version, all, int32(len(parts)) == n
}

func fanOutEquals(rts []*Runtime, version int, want map[string]float64) error {
	got, entries, ok := fanOut(rts)
	if !ok || got != version {
		return fmt.Errorf("fan-out at version %d (complete %v), want %d", got, ok, version)
	}
	if !maps.Equal(entries, want) {
		return fmt.Errorf("fan-out differs: %v", diff(entries, want))
	}
	return nil
}

// TestKafkaRebuildChild is the body of the instance TestKafkaRebuildKill re-executes; run
// directly, without TARN_REBUILD_CHILD, it returns at once.
func TestKafkaRebuildChild(t *testing.T) {
	def := os.Getenv("TARN_REBUILD_CHILD")
	if def == "" {
		return
	}
	in := os.Getenv("TARN_VIEWS_IN")
	v, err := map[string]func(string) (*View, error){"count": countView, "sum": sumView}[def](in)
	must(t, err)
	db, err := state.Open(state.Config{Dir: os.Getenv("TARN_VIEWS_DIR"), MemoryBytes: 64 << 20, Logger: quietLog()})
	must(t, err)
	defer db.Close()
	cfg := rebuildConfig()
	cfg.RecordsPerSecond = 15_000
	rt, err := NewRuntime(Config{
		App: os.Getenv("TARN_VIEWS_APP"), Brokers: []string{os.Getenv(envBrokers)}, State: db, Views: []*View{v},
		ExactlyOnce: true, MaxPollRecords: 1000, TransactionTimeout: 10 * time.Second, Rebuild: cfg, Logger: quietLog(),
		ClientOpts: []kgo.Opt{kgo.MetadataMinAge(250 * time.Millisecond), kgo.SessionTimeout(6 * time.Second)},
	})
	must(t, err)
	must(t, rt.Run(context.Background()))
}

// Killing the only instance during a rebuild: on restart it continues the same version from
// its own group offsets and changelogs (exactly-once, so the sums come out exact), and v1
// stays the serving version throughout until the switch.
func TestKafkaRebuildKill(t *testing.T) {
	k := newKafkaEnv(t)
	in := k.topic("events", 4)
	const n = 60_000
	counts, sums := produceEvents(k, in, 0, n, 50)
	dir := t.TempDir()
	start := func(def string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKafkaRebuildChild$")
		cmd.Env = append(os.Environ(), "TARN_REBUILD_CHILD="+def, "TARN_VIEWS_IN="+in, "TARN_VIEWS_APP="+k.app,
			"TARN_VIEWS_DIR="+dir, envBrokers+"="+k.brokers[0])
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		must(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		must(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
	}
	child := start("count")
	eventually(t, func() error { return k.changelogEquals(1, counts) })
	kill(child)

	child = start("sum")
	eventually(t, func() error {
		if c := committed(k.adm, topic.Group(k.app, rebuildView, 2), in); c < n/3 {
			return fmt.Errorf("v2 committed %d of %d input records", c, n)
		}
		return nil
	})
	kill(child)
	rec := k.versionsRecord()
	if rec.Serving.Version != 1 || rec.Rebuild == nil || rec.Rebuild.Version != 2 || rec.Rebuild.State != StateRebuilding {
		t.Fatalf("after the kill: %+v, want v1 serving and v2 rebuilding", rec)
	}
	start("sum")
	eventually(t, func() error {
		rec := k.versionsRecord()
		if rec.Latest != 2 {
			t.Fatalf("restart started version %d instead of continuing v2: %+v", rec.Latest, rec)
		}
		if rec.Serving.Version == 1 {
			return errNotYet
		}
		return nil
	})
	eventually(t, func() error { return k.changelogEquals(2, sums) })
}

// changelogEquals compares the latest values of a version's served changelog with want.
func (k *kafkaEnv) changelogEquals(version int, want map[string]float64) error {
	got := map[string]float64{}
	for _, r := range k.readEnd(topic.Changelog(k.app, rebuildView, version, "total")) {
		var f float64
		if err := json.Unmarshal(r.Value, &f); err != nil {
			return err
		}
		got[string(r.Key)] = f
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("v%d changelog differs: %v", version, diff(got, want))
	}
	return nil
}

// versionsRecord reads the view's latest record in the versions topic.
func (k *kafkaEnv) versionsRecord() versionsRecord {
	var rec versionsRecord
	for _, r := range k.readEnd(topic.Versions(k.app)) {
		if string(r.Key) == rebuildView {
			must(k.t, json.Unmarshal(r.Value, &rec))
		}
	}
	return rec
}

// BenchmarkKafkaRebuild measures, on the real broker and one instance, the time to process 1M
// events with the count view from scratch (the normal rate) and then to rebuild them as the
// sum view, unthrottled, up to the switch. Rates are input records/s from the first committed
// offset of each version's group to the last. Run with
//
//	go test -run '^$' -bench KafkaRebuild -benchtime 1x ./views/
func BenchmarkKafkaRebuild(b *testing.B) {
	for range b.N {
		benchRebuild(b, 1_000_000)
	}
}

func benchRebuild(b *testing.B, n int) {
	k := newKafkaEnv(b)
	in := k.topic("events", 4)
	for from := 0; from < n; from += 100_000 {
		var recs []*kgo.Record
		for i := from; i < min(from+100_000, n); i++ {
			recs = append(recs, jsonRecord(in, "e"+strconv.Itoa(i), int64(i), trade{Symbol: "S" + strconv.Itoa(i%1000), Qty: i % 10}))
		}
		k.produce(recs...)
	}
	db := openDB(b, b.TempDir())
	v1, err := countView(in)
	must(b, err)
	b.ResetTimer()
	_, stop := k.start(Config{State: db, Views: []*View{v1}, Rebuild: rebuildConfig()})
	normal := k.caughtUp(b, 1, in, int64(n))
	stop()
	v2, err := sumView(in)
	must(b, err)
	began := time.Now()
	rt, _ := k.start(Config{State: db, Views: []*View{v2}, Rebuild: rebuildConfig()})
	rebuild := k.caughtUp(b, 2, in, int64(n))
	for servingIs(rt, 2) != nil {
		time.Sleep(20 * time.Millisecond)
	}
	toSwitch := time.Since(began)
	b.StopTimer()
	b.ReportMetric(float64(n)/normal.Seconds(), "normal-records/s")
	b.ReportMetric(float64(n)/rebuild.Seconds(), "rebuild-records/s")
	b.ReportMetric(toSwitch.Seconds(), "s-to-switch")
	b.Logf("%d events: normal processing %v, rebuild %v (%.2fx), start to switch %v (shadow check of all %d keys included)",
		n, normal.Round(time.Millisecond), rebuild.Round(time.Millisecond), normal.Seconds()/rebuild.Seconds(),
		toSwitch.Round(time.Millisecond), 1000)
}

// caughtUp waits until version's group committed n records of the input and of its
// repartition topic, and returns the time from its first commit.
func (k *kafkaEnv) caughtUp(b *testing.B, version int, in string, n int64) time.Duration {
	group := topic.Group(k.app, rebuildView, version)
	repart := topic.Repartition(k.app, rebuildView, version, "by-symbol")
	var first time.Time
	for {
		c := committed(k.adm, group, in)
		if c > 0 && first.IsZero() {
			first = time.Now()
		}
		if c >= n && committed(k.adm, group, repart) >= n {
			return time.Since(first)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
