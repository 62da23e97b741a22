package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/testenv"
)

// EnvBenchLatency turns TestEventToQueryable on; scripts/bench.sh (make bench) sets it. The
// test measures and prints, it asserts no timing, and it is off in `go test ./...` because it
// loads the machine for a minute or two.
const EnvBenchLatency = "TARN_BENCH_LATENCY"

// Durations of the phases: short enough for a person to wait for `make bench`.
const (
	latRampFor  = 3 * time.Second  // produce or insert as fast as possible this long
	latRampWait = 60 * time.Second // at most this long for the ramp's records to become visible
	latLoadFor  = 20 * time.Second // the paced load at half of the maximum rate
	latLightFor = 10 * time.Second // the light load, to show the floor apart from load
	latLight    = 50               // records or transactions per second of the light load
	latSymbols  = 8                // watched keys per input
)

// TestEventToQueryable is issue #17's benchmark, through `tarn serve` on the real Postgres and
// Kafka: it finds the rate at which price-range (Kafka trades) and orders-per-customer (CDC of
// orders) apply records, then loads each at half of it and prints p50/p99/p99.9 of
//
//   - produce acknowledged → change visible on a live watch (?watch=sse) of the key,
//   - commit returned → change visible on a live watch,
//   - a read-your-writes read (min_offsets= / min_lsn=, wait=5s) answered, issued at once
//     after the produce or commit, while the load runs.
//
// Goal (printed beside the figures, not asserted): latency p99 ≤ 100 ms, read-your-writes
// wait p99 ≤ 250 ms.
func TestEventToQueryable(t *testing.T) {
	if os.Getenv(EnvBenchLatency) == "" {
		t.Skipf("a benchmark: set %s=1 (make bench does)", EnvBenchLatency)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	brokers := testenv.Kafka(t)
	pg := testenv.Postgres(t)
	bin := buildTarn(t)
	app := fmt.Sprintf("lat%d", time.Now().UnixNano()%1e9)
	migrate(ctx, t, pg)
	createEventTopics(ctx, t, brokers)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(250*time.Millisecond),
		kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pcfg, err := pgxpool.ParseConfig(pg)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = latPGWorkers + 2 // the load's workers and the read-your-writes loop
	// The test cluster runs with synchronous_commit=off, where a commit reaches the WAL's
	// flushed end (all a walsender sends) only at the WAL writer's next round, up to
	// wal_writer_delay (200ms) later: a floor of the cluster's, not tarn's. The benchmark's
	// transactions commit as production's do.
	pcfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	in := startServe(t, bin, "--app", app, "--kafka", strings.Join(brokers, ","), "--postgres", pg)
	waitReady(t, in, 2*time.Minute, "readyz")

	k := &kafkaLoad{t: t, in: in, cl: cl, app: app}
	p := &pgLoad{t: t, in: in, pool: pool, base: rand.Int64N(1e12) + 1e12}
	p.createCustomers(ctx)

	var rows []latRow
	light, half := fmt.Sprintf("%d/s", latLight), "half max"
	rows = append(rows, loaded(light, k.measure(ctx, "light", latLight, latLightFor))...)
	kmax := k.maxRate(ctx)
	rows = append(rows, loaded(half, k.measure(ctx, "half", kmax/2, latLoadFor))...)
	rows = append(rows, loaded(light, p.measure(ctx, 1, latLight, latLightFor))...)
	pmax := p.maxRate(ctx)
	rows = append(rows, loaded(half, p.measure(ctx, 2, pmax/2, latLoadFor))...)

	var b strings.Builder
	fmt.Fprintf(&b, "\nevent-to-queryable latency through tarn serve (%s, 1 instance, at-least-once)\n", time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&b, "max applied rate: kafka trades %.0f rec/s, postgres orders %.0f tx/s\n", kmax, pmax)
	fmt.Fprintf(&b, "  (records of a %s ramp over the time until the last was visible: when tarn keeps up, the writer's rate, a floor of tarn's)\n", latRampFor)
	fmt.Fprintf(&b, "each input: %d/s for %s (the floor), then half of its maximum for %s (the issue's figure)\n\n", latLight, latLightFor, latLoadFor)
	fmt.Fprintf(&b, "%-30s %-8s %8s %9s %8s %8s %8s %8s %s\n", "figure", "load", "rate/s", "n", "p50", "p99", "p99.9", "max", "goal")
	for _, r := range rows {
		fmt.Fprintln(&b, r)
	}
	for _, r := range rows {
		if r.load == half && len(r.by) > 0 {
			var ms []string
			for _, d := range r.by {
				ms = append(ms, fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)))
			}
			fmt.Fprintf(&b, "\n%s at half max, p99 (ms) of each %s of writes: %s", r.name, latBucket, strings.Join(ms, " "))
		}
	}
	fmt.Fprintln(&b)
	fmt.Fprintf(&b, "\nmean time per polled batch (tarn_views_batch_seconds, the whole run): %s\n", batchTimes(in))
	fmt.Print(b.String())
}

// latRow is one line of the printed table.
type latRow struct {
	name string
	load string // "50/s" or "half max"
	rate float64
	goal string
	lat  []time.Duration
	by   []time.Duration // the p99 of each latBucket of writes, in order (watch rows only)
}

// latBucket is the span of writes each figure of a row's timeline covers.
const latBucket = 2 * time.Second

func (r latRow) String() string {
	if len(r.lat) == 0 {
		return fmt.Sprintf("%-30s %-8s %8.0f %9d no samples", r.name, r.load, r.rate, 0)
	}
	slices.Sort(r.lat)
	q := func(f float64) string {
		i := int(f * float64(len(r.lat)))
		if i >= len(r.lat) {
			i = len(r.lat) - 1
		}
		return fmtMS(r.lat[i])
	}
	return fmt.Sprintf("%-30s %-8s %8.0f %9d %8s %8s %8s %8s %s", r.name, r.load, r.rate, len(r.lat),
		q(0.50), q(0.99), q(0.999), fmtMS(r.lat[len(r.lat)-1]), r.goal)
}

func loaded(load string, rows []latRow) []latRow {
	for i := range rows {
		rows[i].load = load
	}
	return rows
}

func fmtMS(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// arrivals pairs, per key, the n-th write's acknowledgement with the time a watch first showed
// a count of n or more. The n-th write of a key is the n-th it counts because each key's
// writes are ordered: trades are keyed by symbol (one partition, kept through the
// repartition by symbol), and one worker commits each customer's orders in turn.
type arrivals struct {
	mu   sync.Mutex
	ack  map[string][]time.Time
	seen map[string][]time.Time
}

func newArrivals() *arrivals {
	return &arrivals{ack: map[string][]time.Time{}, seen: map[string][]time.Time{}}
}

func (a *arrivals) acked(key string, n int, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ack[key] = setAt(a.ack[key], n, at)
}

func (a *arrivals) visible(key string, count int, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for n := len(a.seen[key]) + 1; n <= count; n++ {
		a.seen[key] = setAt(a.seen[key], n, at)
	}
}

// setAt sets s[n-1], growing s.
func setAt(s []time.Time, n int, at time.Time) []time.Time {
	for len(s) < n {
		s = append(s, time.Time{})
	}
	s[n-1] = at
	return s
}

// latencies are seen − ack of every write both acknowledged and seen, and how many writes
// were acknowledged but never seen (these are left out of the figures; the test reports them).
// A change can reach the watch before its acknowledgement reaches the producer: that counts 0.
func (a *arrivals) latencies() (lat []time.Duration, unseen int) {
	lat, _, unseen = a.latenciesAt()
	return lat, unseen
}

// latenciesAt is latencies with each one's acknowledgement time.
func (a *arrivals) latenciesAt() (lat []time.Duration, ats []time.Time, unseen int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, acks := range a.ack {
		seen := a.seen[key]
		for i, t := range acks {
			if t.IsZero() {
				continue
			}
			if i >= len(seen) || seen[i].IsZero() {
				unseen++
				continue
			}
			lat = append(lat, max(0, seen[i].Sub(t)))
			ats = append(ats, t)
		}
	}
	return lat, ats, unseen
}

// timeline is the p99 of lat over each latBucket of at, from the first.
func timeline(lat []time.Duration, at []time.Time) []time.Duration {
	if len(at) == 0 {
		return nil
	}
	first := slices.MinFunc(at, time.Time.Compare)
	var buckets [][]time.Duration
	for i, t := range at {
		b := int(t.Sub(first) / latBucket)
		for len(buckets) <= b {
			buckets = append(buckets, nil)
		}
		buckets[b] = append(buckets[b], lat[i])
	}
	out := make([]time.Duration, len(buckets))
	for i, b := range buckets {
		if len(b) > 0 {
			slices.Sort(b)
			out[i] = b[len(b)*99/100]
		}
	}
	return out
}

// watchKey follows url (a ?watch=sse stream) until ctx ends, reporting each change's count as
// countOf reads it from the change's value. Events are read as soon as a line arrives.
func watchKey(ctx context.Context, t *testing.T, url string, countOf func(json.RawMessage) int, got func(count int, at time.Time)) {
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var name string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = line[7:]
			case strings.HasPrefix(line, "data: ") && name == "change":
				at := time.Now()
				var c struct{ Value json.RawMessage }
				if err := json.Unmarshal([]byte(line[6:]), &c); err != nil {
					t.Errorf("watch %s: change %s: %v", url, line, err)
				}
				got(countOf(c.Value), at)
			case line == "":
				name = ""
			}
		}
		resp.Body.Close()
	}
}

// pace calls do about rate times a second until d has passed, from workers goroutines, and
// returns how many calls succeeded (returned true). Worker w makes calls w, w+workers, …
func pace(ctx context.Context, rate float64, d time.Duration, workers int, do func(ctx context.Context, i int) bool) int {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	var calls atomic.Int64
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := w; ctx.Err() == nil; i += workers {
				due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
				if wait := time.Until(due); wait > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(wait):
					}
				}
				if do(ctx, i) {
					calls.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(calls.Load())
}

// waitVisible polls total until it reaches want or latRampWait passes, and returns the time
// it got there (or the last poll) and the total then.
func waitVisible(ctx context.Context, want int, total func() int) (time.Time, int) {
	deadline := time.Now().Add(latRampWait)
	for {
		n, at := total(), time.Now()
		if n >= want || at.After(deadline) || ctx.Err() != nil {
			return at, n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// batchTimes is each view's mean tarn_views_batch_seconds from in's /metrics, as
// "view=12.3ms(n) …" for the views the benchmark loads.
func batchTimes(in *instance) string {
	_, text := get(in.base + "/metrics")
	sum, count := map[string]float64{}, map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok || (name != "tarn_views_batch_seconds_sum" && name != "tarn_views_batch_seconds_count") {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		var v float64
		fmt.Sscan(value, &v)
		for _, l := range strings.Split(labels, ",") {
			if view, ok := strings.CutPrefix(l, `view="`); ok {
				view = strings.TrimSuffix(view, `"`)
				if name == "tarn_views_batch_seconds_sum" {
					sum[view] += v
				} else {
					count[view] += v
				}
			}
		}
	}
	var out []string
	for _, view := range []string{"price-range", "orders-per-customer"} {
		if count[view] > 0 {
			out = append(out, fmt.Sprintf("%s=%s (%.0f batches)", view, fmtMS(time.Duration(sum[view]/count[view]*float64(time.Second))), count[view]))
		}
	}
	return strings.Join(out, ", ")
}
