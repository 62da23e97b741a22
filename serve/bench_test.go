package serve_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// benchKeys is the number of keys of the load benchmark's view (issue 7: 1M keys).
const benchKeys = 1_000_000

var bench struct {
	once sync.Once
	ts   *httptest.Server
}

// benchServer serves a view of benchKeys keys with 100-byte JSON values on loopback TCP.
func benchServer(b *testing.B) *httptest.Server {
	bench.once.Do(func() {
		be := newPebbleBackend(b)
		v := be.addView("bench", 8, false)
		began := time.Now()
		value := []byte(fmt.Sprintf(`{"name":"%090d"}`, 0))
		v.load(b, benchKeys, benchKey, func(int) []byte { return value })
		// Compact now so that the load's compactions do not compete with the reads.
		if err := be.db.Compact(b.Context(), []byte("bench"), []byte("bench\xff"), true); err != nil {
			b.Fatal(err)
		}
		b.Logf("loaded and compacted %d keys in %s", benchKeys, time.Since(began))
		bench.ts = start(b, be)
	})
	return bench.ts
}

func benchKey(i int) []byte { return fmt.Appendf(nil, "key-%07d", i) }

// BenchmarkPointReadLoopback measures point reads of random keys over loopback HTTP/1.1 with
// keep-alive, as a closed loop of 32 clients (throughput) and as an open loop at 10k reads/s
// (latency measured from each read's scheduled time, so queueing counts). b.N is the number
// of reads: go test -run '^$' -bench PointReadLoopback -benchtime 200000x ./serve
func BenchmarkPointReadLoopback(b *testing.B) {
	ts := benchServer(b)
	b.Run("closed-32", func(b *testing.B) { closedLoop(b, ts.URL, 32) })
	b.Run("open-10k", func(b *testing.B) { openLoop(b, ts.URL, 10_000, 32) })
}

func benchClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}
}

func read(c *http.Client, base string, rng *rand.Rand) error {
	resp, err := c.Get(base + "/v1/views/bench/keys/" + string(benchKey(rng.IntN(benchKeys))))
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return err
}

func closedLoop(b *testing.B, base string, workers int) {
	c := benchClient(workers)
	lat := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	b.ResetTimer()
	began := time.Now()
	for w := range workers {
		n := b.N / workers
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			lat[w] = make([]time.Duration, 0, n)
			for range n {
				t0 := time.Now()
				if err := read(c, base, rng); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	report(b, lat, time.Since(began))
}

// openLoop sends rate reads per second: worker j sends its k-th read at start + (k*workers+j)
// intervals, and a late read counts its lateness as latency.
func openLoop(b *testing.B, base string, rate, workers int) {
	c := benchClient(workers)
	interval := time.Second / time.Duration(rate)
	lat := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	b.ResetTimer()
	began := time.Now()
	for w := range workers {
		n := b.N / workers
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			lat[w] = make([]time.Duration, 0, n)
			for k := range n {
				due := began.Add(time.Duration(k*workers+w) * interval)
				time.Sleep(time.Until(due))
				if err := read(c, base, rng); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(due))
			}
		})
	}
	wg.Wait()
	report(b, lat, time.Since(began))
}

func report(b *testing.B, perWorker [][]time.Duration, elapsed time.Duration) {
	b.StopTimer()
	all := slices.Concat(perWorker...)
	if len(all) == 0 {
		return
	}
	slices.Sort(all)
	q := func(f float64) float64 { return float64(all[int(f*float64(len(all)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(0.999), "p99.9-ms")
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "reads/s")
}
