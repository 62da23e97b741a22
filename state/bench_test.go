package state

import (
	"encoding/binary"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
)

// Benchmarks of the Pebble side alone: Kafka is not involved, the Txn is marked produced by
// the test. 16-byte keys, 100-byte values, the NOTES.md shapes.

const benchKeys = 1_000_000

func benchKey(b []byte, i int) []byte {
	b = append(b[:0], "key-"...)
	return binary.BigEndian.AppendUint64(append(b, "0000"...), uint64(i))
}

// applyUnlogged commits a Txn without a changelog, for benchmarks of the local write path.
func applyUnlogged(t *Txn) error {
	t.state = txnProduced
	return t.Apply()
}

// benchDB opens a DB in a temp dir with a 256 MiB budget holding n keys.
func benchDB(b *testing.B, n int) (*DB, *KV) {
	db, err := Open(Config{Dir: b.TempDir(), MemoryBytes: 256 << 20, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	kv, err := db.KV(ID{App: "bench", View: "v", Version: 1, Store: "s"})
	if err != nil {
		b.Fatal(err)
	}
	val := make([]byte, 100)
	var key []byte
	for start := 0; start < n; start += 1000 {
		txn := db.NewTxn()
		for i := start; i < start+1000; i++ {
			key = benchKey(key, i)
			if err := kv.Put(txn, key, val); err != nil {
				b.Fatal(err)
			}
		}
		if err := applyUnlogged(txn); err != nil {
			b.Fatal(err)
		}
	}
	return db, kv
}

// BenchmarkPut measures one Put in Txns of 1000 into an empty DB, Apply included (ns/op is
// per Put).
func BenchmarkPut(b *testing.B) {
	db, kv := benchDB(b, 0)
	val := make([]byte, 100)
	var key []byte
	txn := db.NewTxn()
	b.SetBytes(116)
	i := 0
	for b.Loop() {
		key = benchKey(key, i)
		if err := kv.Put(txn, key, val); err != nil {
			b.Fatal(err)
		}
		i++
		if i%1000 == 0 {
			if err := applyUnlogged(txn); err != nil {
				b.Fatal(err)
			}
			txn = db.NewTxn()
		}
	}
	if err := applyUnlogged(txn); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkGet measures random point reads over 1M keys, after one full scan has loaded the
// block cache (the budget holds them all).
func BenchmarkGet(b *testing.B) {
	db, kv := benchDB(b, benchKeys)
	it, err := kv.Range(db, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	for it.Next() {
		_ = it.Value()
	}
	if err := it.Close(); err != nil {
		b.Fatal(err)
	}
	var key []byte
	for b.Loop() {
		key = benchKey(key, rand.IntN(benchKeys))
		if _, ok, err := kv.Get(db, key); err != nil || !ok {
			b.Fatalf("get %x: %v %v", key, ok, err)
		}
	}
}

// BenchmarkScan measures range scans of 100 keys from a random start on a snapshot (ns/op
// is per scan; keys/s is reported).
func BenchmarkScan(b *testing.B) {
	db, kv := benchDB(b, benchKeys)
	snap := db.NewSnapshot()
	defer snap.Close()
	var key []byte
	n := 0
	for b.Loop() {
		key = benchKey(key, rand.IntN(benchKeys-100))
		it, err := kv.Range(snap, key, nil)
		if err != nil {
			b.Fatal(err)
		}
		for j := 0; j < 100 && it.Next(); j++ {
			_ = it.Value()
			n++
		}
		if err := it.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "keys/s")
}
