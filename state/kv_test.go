package state_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/state"
	"github.com/tarnhq/tarn/state/statetest"
)

func mustKV(t testing.TB, db *state.DB, id state.ID) *state.KV {
	t.Helper()
	kv, err := db.KV(id)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func get(t testing.TB, kv *state.KV, r state.Reader, key string) (string, bool) {
	t.Helper()
	v, ok, err := kv.Get(r, []byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return string(v), ok
}

// TestTxnOverlayAndApply checks that a Txn reads its own pending writes, that nothing is
// visible elsewhere before Apply, and that Apply records the changelog offset it reached.
func TestTxnOverlayAndApply(t *testing.T) {
	brokers := statetest.Kafka(t)
	db := statetest.Open(t)
	id := newID(t, "counts", 0)
	ensure(t, brokers, id, 1)
	cl := statetest.Client(t, brokers)
	kv := mustKV(t, db, id)

	txn := db.NewTxn()
	for _, k := range []string{"a", "b", "c"} {
		if err := kv.Put(txn, []byte(k), []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Put(txn, []byte("a"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(txn, []byte("b")); err != nil {
		t.Fatal(err)
	}
	if v, ok := get(t, kv, txn, "a"); !ok || v != "2" {
		t.Fatalf("txn read a = %q %v, want 2", v, ok)
	}
	if _, ok := get(t, kv, txn, "b"); ok {
		t.Fatal("txn still sees deleted b")
	}
	if _, ok := get(t, kv, db, "a"); ok {
		t.Fatal("db sees a before Apply")
	}
	if got := txn.Len(); got != 3 {
		t.Fatalf("txn.Len = %d, want 3 (one record per written key)", got)
	}
	if err := txn.Apply(); !errors.Is(err, state.ErrTxnState) {
		t.Fatalf("Apply before Produce = %v, want ErrTxnState", err)
	}
	commit(t, txn, cl)
	equalMaps(t, "db", dumpKV(t, kv, db), map[string]string{"a": "2", "c": "1"})
	off, ok, err := kv.Offset(db)
	if err != nil || !ok || off != 2 {
		t.Fatalf("Offset = %d %v %v, want 2 (three records at offsets 0..2)", off, ok, err)
	}
	equalMaps(t, "changelog", readChangelog(t, brokers, id.Topic(), 0), map[string]string{"a": "2", "c": "1"})
	if err := kv.Put(txn, []byte("d"), nil); !errors.Is(err, state.ErrTxnState) {
		t.Fatalf("Put after Apply = %v, want ErrTxnState", err)
	}
}

func TestRangeAndPrefix(t *testing.T) {
	db := statetest.Open(t)
	id := newID(t, "s", 0)
	kv := mustKV(t, db, id)
	other := mustKV(t, db, state.ID{App: id.App, View: id.View, Version: id.Version, Store: id.Store, Partition: 1})
	txn := db.NewTxn()
	for i := range 20 {
		if err := kv.Put(txn, fmt.Appendf(nil, "k%02d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := other.Put(txn, fmt.Appendf(nil, "k%02d", i), []byte("other")); err != nil {
			t.Fatal(err)
		}
	}
	// Reads through the Txn see the pending writes, in order, and never the other partition.
	cases := []struct {
		name string
		iter func() (*state.Iter, error)
		want []string
	}{
		{"range", func() (*state.Iter, error) { return kv.Range(txn, []byte("k05"), []byte("k08")) }, []string{"k05", "k06", "k07"}},
		{"prefix", func() (*state.Iter, error) { return kv.Prefix(txn, []byte("k1")) }, []string{"k10", "k11", "k12", "k13", "k14", "k15", "k16", "k17", "k18", "k19"}},
		{"open end", func() (*state.Iter, error) { return kv.Range(txn, []byte("k18"), nil) }, []string{"k18", "k19"}},
	}
	for _, c := range cases {
		it, err := c.iter()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for it.Next() {
			got = append(got, string(it.Key()))
			if string(it.Value()) != "x" {
				t.Errorf("%s: %s = %q, want x", c.name, it.Key(), it.Value())
			}
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	txn.Discard()
}

// TestSnapshotIsConsistent checks that a snapshot keeps seeing one state, offsets included,
// while later transactions apply.
func TestSnapshotIsConsistent(t *testing.T) {
	brokers := statetest.Kafka(t)
	db := statetest.Open(t)
	id := newID(t, "s", 0)
	ensure(t, brokers, id, 1)
	cl := statetest.Client(t, brokers)
	kv := mustKV(t, db, id)
	txn := db.NewTxn()
	_ = kv.Put(txn, []byte("a"), []byte("1"))
	commit(t, txn, cl)

	snap := db.NewSnapshot()
	defer snap.Close()
	txn = db.NewTxn()
	_ = kv.Put(txn, []byte("a"), []byte("2"))
	_ = kv.Put(txn, []byte("b"), []byte("2"))
	commit(t, txn, cl)

	equalMaps(t, "snapshot", dumpKV(t, kv, snap), map[string]string{"a": "1"})
	equalMaps(t, "db", dumpKV(t, kv, db), map[string]string{"a": "2", "b": "2"})
	if off, _, _ := kv.Offset(snap); off != 0 {
		t.Fatalf("snapshot offset %d, want 0", off)
	}
	if off, _, _ := kv.Offset(db); off != 2 {
		t.Fatalf("db offset %d, want 2", off)
	}
}

func TestDropVersion(t *testing.T) {
	brokers := statetest.Kafka(t)
	db := statetest.Open(t)
	cl := statetest.Client(t, brokers)
	id := newID(t, "s", 0)
	v2 := id
	v2.Version = 2
	ensure(t, brokers, id, 1)
	ensure(t, brokers, v2, 1)
	kv1, kv2 := mustKV(t, db, id), mustKV(t, db, v2)
	txn := db.NewTxn()
	_ = kv1.Put(txn, []byte("a"), []byte("1"))
	_ = kv2.Put(txn, []byte("a"), []byte("2"))
	commit(t, txn, cl) // both partitions in one Pebble batch

	if err := db.DropVersion(id.App, id.View, id.Version); err != nil {
		t.Fatal(err)
	}
	equalMaps(t, "dropped v1", dumpKV(t, kv1, db), map[string]string{})
	if _, ok, _ := kv1.Offset(db); ok {
		t.Fatal("dropped v1 still has an applied offset")
	}
	equalMaps(t, "kept v2", dumpKV(t, kv2, db), map[string]string{"a": "2"})
}

func TestOpenConflicts(t *testing.T) {
	db := statetest.Open(t)
	id := newID(t, "s", 0)
	mustKV(t, db, id)
	if _, err := db.Window(id, state.WindowOptions{Size: 1}); !errors.Is(err, state.ErrInvalidOptions) {
		t.Fatalf("Window with Size 1ns = %v, want ErrInvalidOptions", err)
	}
	if _, err := db.Window(id, state.WindowOptions{Size: 1e9}); !errors.Is(err, state.ErrStoreConflict) {
		t.Fatalf("opening a KV as a Window = %v, want ErrStoreConflict", err)
	}
	if _, err := db.KV(state.ID{App: "a.b", View: "", Store: "s", Partition: -1}); !errors.Is(err, state.ErrInvalidID) {
		t.Fatalf("bad ID = %v, want ErrInvalidID", err)
	}
}

// TestProduceRefusesWrongPartitioner checks that a client whose partitioner ignores
// Record.Partition is caught instead of logging a store to another partition's changelog.
func TestProduceRefusesWrongPartitioner(t *testing.T) {
	brokers := statetest.Kafka(t)
	db := statetest.Open(t)
	id := newID(t, "s", 1)
	ensure(t, brokers, id, 2)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...)) // default: partition by key hash
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	kv := mustKV(t, db, id)
	txn := db.NewTxn()
	key := []byte("k0")
	for i := 0; partition.For(key, 2) == id.Partition; i++ {
		key = fmt.Appendf(nil, "k%d", i)
	}
	_ = kv.Put(txn, key, []byte("v"))
	if err := txn.Produce(context.Background(), cl); !errors.Is(err, state.ErrPartitioner) {
		t.Fatalf("Produce with a key-hash partitioner = %v, want ErrPartitioner", err)
	}
	if err := txn.Apply(); !errors.Is(err, state.ErrTxnState) {
		t.Fatalf("Apply after a failed Produce = %v, want ErrTxnState", err)
	}
	txn.Discard()
}

// TestRestoreWipesStoreAheadOfChangelog checks that local data whose applied offset is past
// the end of its changelog (the topic was recreated) is discarded, not mixed with new data.
func TestRestoreWipesStoreAheadOfChangelog(t *testing.T) {
	brokers := statetest.Kafka(t)
	ctx := context.Background()
	db := statetest.Open(t)
	id := newID(t, "s", 0)
	ensure(t, brokers, id, 1)
	cl := statetest.Client(t, brokers)
	kv := mustKV(t, db, id)
	txn := db.NewTxn()
	for i := range 10 {
		_ = kv.Put(txn, fmt.Appendf(nil, "old%d", i), []byte("v"))
	}
	commit(t, txn, cl)

	adm := kadm.NewClient(cl)
	if _, err := adm.DeleteTopic(ctx, id.Topic()); err != nil {
		t.Fatal(err)
	}
	ensure(t, brokers, id, 1)
	cl = statetest.Client(t, brokers) // the old client remembers the deleted topic's ID
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: id.Topic(), Key: []byte("new"), Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	st, err := db.Restore(ctx, restoreCfg(brokers), kv)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Partitions[0].Wiped {
		t.Error("restore did not report the wipe")
	}
	equalMaps(t, "after restore from a recreated changelog", dumpKV(t, kv, db), map[string]string{"new": "v"})
}

// TestGetAfterReopen checks that keys and windows written before the DB was closed are found
// by Get and Fetch after it is opened again: the first handle of a partition fills its key
// filters from disk, and a key missing from them would read as absent.
func TestGetAfterReopen(t *testing.T) {
	brokers := statetest.Kafka(t)
	fs := vfs.NewMem()
	open := func() *state.DB {
		db, err := state.Open(state.Config{Dir: "/tarn-data", FS: fs, MemoryBytes: 32 << 20,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	id, wid := newID(t, "reopen", 0), newID(t, "reopen-windows", 0)
	ensure(t, brokers, id, 1)
	ensure(t, brokers, wid, 1)
	wopts := state.WindowOptions{Size: time.Second, Retention: time.Hour}
	cl := statetest.Client(t, brokers)
	db := open()
	kv, win := mustKV(t, db, id), mustWindow(t, db, wid, wopts)
	txn := db.NewTxn()
	for i := range 1000 {
		if err := kv.Put(txn, fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if err := win.Put(txn, fmt.Appendf(nil, "k%d", i), time.UnixMilli(int64(i)*1000), []byte("w")); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, txn, cl)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = open()
	defer db.Close()
	kv, win = mustKV(t, db, id), mustWindow(t, db, wid, wopts)
	all := [2]time.Time{time.UnixMilli(0), time.UnixMilli(1000 * 1000)}
	for i := range 1000 {
		k := fmt.Sprintf("k%d", i)
		if _, ok := get(t, kv, db, k); !ok {
			t.Fatalf("%s is absent after reopening", k)
		}
		if got := fetch(t, win, db, k, false, all[0], all[1]); len(got) != 1 {
			t.Fatalf("Fetch(%s) after reopening = %v, want its one window", k, got)
		}
	}
	if _, ok := get(t, kv, db, "never-written"); ok {
		t.Fatal("a key never written is present")
	}
	if got := fetch(t, win, db, "never-written", false, all[0], all[1]); len(got) != 0 {
		t.Fatalf("Fetch of a key never written = %v", got)
	}
}
