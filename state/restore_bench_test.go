package state_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/state"
)

// BenchmarkRestore restores 1M records of ~100 bytes (16-byte key, 84-byte value) from one
// changelog partition of the real Kafka into a fresh Pebble directory on disk. Producing the
// records is set-up, not timed. Run it once: -bench Restore -benchtime 1x.
func BenchmarkRestore(b *testing.B) {
	const records = 1_000_000
	brokers := testenv.Kafka(b)
	id := newID(b, "bench", 0)
	ensure(b, brokers, id, 1)
	produceBench(b, brokers, id.Topic(), records)

	for _, mem := range []int64{64 << 20, 512 << 20} {
		b.Run(fmt.Sprintf("memory=%dMiB", mem>>20), func(b *testing.B) {
			benchRestore(b, brokers, id, records, mem)
		})
	}
}

// benchRestore restores the changelog of id into fresh DBs with a memory budget of mem.
func benchRestore(b *testing.B, brokers []string, id state.ID, records int, mem int64) {
	var bytes int64
	cpu0 := cpuTime(b)
	for b.Loop() {
		db, err := state.Open(state.Config{Dir: filepath.Join(b.TempDir(), "db"), MemoryBytes: mem, Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		kv := mustKV(b, db, id)
		st, err := db.Restore(context.Background(), restoreCfg(brokers), kv)
		if err != nil {
			b.Fatal(err)
		}
		if st.Records != int64(records) {
			b.Fatalf("restored %d records, want %d", st.Records, records)
		}
		bytes += st.Bytes
		closeDB(b, db)
	}
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(records*b.N)/secs, "records/s")
	b.ReportMetric(float64(bytes)/secs/1e6, "MB/s")
	// CPU of this process only (the broker is another process): on a shared machine this
	// says more about restore's own cost than the wall clock does.
	b.ReportMetric(float64(records*b.N)/(cpuTime(b)-cpu0).Seconds(), "records/cpu-s")
}

// cpuTime is the user+system CPU time this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// produceBench writes n records with distinct keys to partition 0 of topic.
func produceBench(b *testing.B, brokers []string, topic string, n int) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	value := make([]byte, 84)
	if _, err := rand.Read(value); err != nil {
		b.Fatal(err)
	}
	var (
		mu       sync.Mutex
		firstErr error
	)
	for i := range n {
		r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "key-%012d", i), Value: value}
		cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}
