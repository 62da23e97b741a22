package cdc

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tarnhq/tarn/internal/topic"
)

// TestThroughput measures snapshot and streaming throughput of 1M rows of about 200 bytes
// into the real Kafka. It prints figures and asserts nothing about them; run it with
// TARN_CDC_BENCH=1 go test -run TestThroughput -v ./cdc/
func TestThroughput(t *testing.T) {
	if os.Getenv("TARN_CDC_BENCH") == "" {
		t.Skip("set TARN_CDC_BENCH=1 to measure throughput")
	}
	for _, txn := range []bool{false, true} {
		t.Run(fmt.Sprintf("transactional=%v", txn), func(t *testing.T) { throughput(t, txn) })
	}
}

const benchRows = 1_000_000

func throughput(t *testing.T, transactional bool) {
	e := newEnv(t)
	c := e.conn(t)
	mustExec(t, c, `CREATE TABLE bench (id bigint PRIMARY KEY, name text, qty int, at timestamptz, price numeric(10,2), pad text)`)
	insert := func(from int) {
		mustExec(t, c, fmt.Sprintf(`INSERT INTO bench SELECT g, 'name ' || g, g %% 1000, now(), g / 100.0, repeat('p', 110)
			FROM generate_series(%d, %d) g`, from, from+benchRows-1))
	}
	insert(1)
	var rowBytes float64
	if err := c.QueryRow(context.Background(), "SELECT avg(octet_length(row_to_json(b)::text)) FROM bench b").Scan(&rowBytes); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(t, "public.bench")
	cfg.Transactional = transactional
	cfg.BatchInterval = 100 * time.Millisecond
	cfg.HeartbeatInterval = time.Minute

	peak := watchHeap(t)
	begin := time.Now()
	r := start(t, cfg)
	waitCaughtUp(t, e, cfg, currentLSN(t, c))
	report(t, "snapshot", begin, rowBytes, peak)
	r.stop(t)

	// Streaming: one 1M-row transaction, then the same in 1000-row transactions, each written
	// while the source is down and timed from its restart until it has caught up.
	insert(benchRows + 1)
	peak.Store(0)
	begin = time.Now()
	r = start(t, cfg)
	waitCaughtUp(t, e, cfg, currentLSN(t, c))
	report(t, "stream, one 1M-row transaction", begin, rowBytes, peak)
	r.stop(t)

	mustExec(t, c, `DO $$ BEGIN FOR i IN 0..999 LOOP
		UPDATE bench SET qty = qty + 1 WHERE id > i * 1000 AND id <= (i + 1) * 1000; COMMIT; END LOOP; END $$`)
	peak.Store(0)
	begin = time.Now()
	start(t, cfg)
	waitCaughtUp(t, e, cfg, currentLSN(t, c))
	report(t, "stream, 1000 transactions of 1000 updates", begin, rowBytes, peak)
}

func currentLSN(t *testing.T, c *pgx.Conn) LSN {
	t.Helper()
	var s string
	if err := c.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	l, err := ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// waitCaughtUp waits until the source's durable position covers target.
func waitCaughtUp(t *testing.T, e *env, cfg Config, target LSN) {
	t.Helper()
	cfg.Slot = defaultName(e.app)
	eventually(t, 10*time.Minute, func() string {
		pos, err := readPosition(context.Background(), &Config{Brokers: e.brokers, Slot: cfg.Slot}, nil, topic.CDCPosition(e.app, cfg.Slot))
		if err != nil || pos == nil || pos.Resume < target {
			return fmt.Sprintf("position %v (%v), want %s", pos, err, target)
		}
		return ""
	})
}

// watchHeap samples the heap in use until the test ends and keeps its peak.
func watchHeap(t *testing.T) *atomic.Uint64 {
	peak := new(atomic.Uint64)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		var ms runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
		}
	}()
	return peak
}

func report(t *testing.T, what string, begin time.Time, rowBytes float64, peak *atomic.Uint64) {
	d := time.Since(begin)
	t.Logf("%s: %d rows (%.0f B JSON each) in %s = %.0f rows/s, %.1f MB/s; peak heap in use %d MiB",
		what, benchRows, rowBytes, d.Round(time.Millisecond), benchRows/d.Seconds(), benchRows*rowBytes/d.Seconds()/1e6, peak.Load()>>20)
}
