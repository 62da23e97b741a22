package state_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/state"
	"github.com/tarnhq/tarn/state/statetest"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openDir opens a DB on the real file system in dir.
func openDir(t testing.TB, dir string) *state.DB {
	t.Helper()
	db, err := state.Open(state.Config{Dir: dir, MemoryBytes: 64 << 20, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func closeDB(t testing.TB, db *state.DB) {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// kvParts opens the KV handles of partitions 0..n-1 of id's store.
func kvParts(t testing.TB, db *state.DB, id state.ID, n int32) []*state.KV {
	var kvs []*state.KV
	for p := range n {
		id.Partition = p
		kvs = append(kvs, mustKV(t, db, id))
	}
	return kvs
}

func stores(kvs []*state.KV) []state.Store {
	var out []state.Store
	for _, kv := range kvs {
		out = append(out, kv)
	}
	return out
}

// TestRestoreAfterWipe writes 100k keys with overwrites and deletes to two partitions, drops
// the local directory, restores, and compares every key with what was written and with the
// changelog.
func TestRestoreAfterWipe(t *testing.T) {
	brokers := testenv.Kafka(t)
	const parts = 2
	id := newID(t, "kv", 0)
	ensure(t, brokers, id, parts)
	cl := statetest.Client(t, brokers)
	dir := filepath.Join(t.TempDir(), "db")
	db := openDir(t, dir)
	kvs := kvParts(t, db, id, parts)
	want := make([]map[string]string, parts)
	for p := range want {
		want[p] = make(map[string]string)
	}
	write := func(txn *state.Txn, key, value string, del bool) {
		p := partition.For([]byte(key), parts)
		var err error
		if del {
			err = kvs[p].Delete(txn, []byte(key))
			delete(want[p], key)
		} else {
			err = kvs[p].Put(txn, []byte(key), []byte(value))
			want[p][key] = value
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	const keys, batch = 100_000, 2_000
	for round, step := range []struct{ stride, mod int }{{1, 0}, {3, 1}, {7, 2}} {
		// Round 0 writes every key; round 1 overwrites every 3rd; round 2 deletes every 7th.
		txn := db.NewTxn()
		for i := 0; i < keys; i += step.stride {
			write(txn, fmt.Sprintf("key-%06d", i), fmt.Sprintf("r%d-%d", round, i), step.mod == 2)
			if txn.Len() >= batch {
				commit(t, txn, cl)
				txn = db.NewTxn()
			}
		}
		commit(t, txn, cl)
	}
	for p := range parts {
		equalMaps(t, fmt.Sprintf("partition %d before wipe", p), dumpKV(t, kvs[p], db), want[p])
	}
	closeDB(t, db)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}

	db = openDir(t, dir)
	defer closeDB(t, db)
	kvs = kvParts(t, db, id, parts)
	st, err := db.Restore(context.Background(), restoreCfg(brokers), stores(kvs)...)
	if err != nil {
		t.Fatal(err)
	}
	written := int64(keys + (keys+2)/3 + (keys+6)/7)
	if st.Records != written {
		t.Errorf("restore read %d records, want %d (every record produced)", st.Records, written)
	}
	for p := range parts {
		equalMaps(t, fmt.Sprintf("partition %d after restore", p), dumpKV(t, kvs[p], db), want[p])
		equalMaps(t, fmt.Sprintf("partition %d vs changelog", p), dumpKV(t, kvs[p], db), readChangelog(t, brokers, id.Topic(), int32(p)))
		if !st.Partitions[p].Wiped {
			t.Errorf("partition %d: restore of an empty directory did not report Wiped", p)
		}
	}
}

// TestRestoreReadsOnlyTail checks that a store with local data reads only the changelog
// records written since it last applied (here by another instance that took over).
func TestRestoreReadsOnlyTail(t *testing.T) {
	brokers := testenv.Kafka(t)
	id := newID(t, "kv", 0)
	ensure(t, brokers, id, 1)
	cl := statetest.Client(t, brokers)
	ctx := context.Background()

	dirA := filepath.Join(t.TempDir(), "a")
	a := openDir(t, dirA)
	kvA := mustKV(t, a, id)
	for b := range 2 {
		txn := a.NewTxn()
		for i := range 500 {
			_ = kvA.Put(txn, fmt.Appendf(nil, "k%04d", b*500+i), []byte("a"))
		}
		commit(t, txn, cl)
	}
	closeDB(t, a)
	a = openDir(t, dirA)
	kvA = mustKV(t, a, id)
	if st, err := a.Restore(ctx, restoreCfg(brokers), kvA); err != nil || st.Records != 0 {
		t.Fatalf("restore of an up-to-date store read %d records (%v), want 0", st.Records, err)
	}

	// Instance B takes the partition over: full restore, then 50 writes.
	b := statetest.Open(t)
	kvB := mustKV(t, b, id)
	if st, err := b.Restore(ctx, restoreCfg(brokers), kvB); err != nil || st.Records != 1000 {
		t.Fatalf("full restore read %d records (%v), want 1000", st.Records, err)
	}
	txn := b.NewTxn()
	for i := range 50 {
		_ = kvB.Put(txn, fmt.Appendf(nil, "k%04d", i*7), []byte("b"))
	}
	commit(t, txn, cl)

	st, err := a.Restore(ctx, restoreCfg(brokers), kvA)
	if err != nil {
		t.Fatal(err)
	}
	if st.Records != 50 || st.Partitions[0].From != 1000 || st.Partitions[0].End != 1050 {
		t.Fatalf("tail restore: %d records from %d to %d, want 50 from 1000 to 1050", st.Records, st.Partitions[0].From, st.Partitions[0].End)
	}
	equalMaps(t, "A after tail restore", dumpKV(t, kvA, a), dumpKV(t, kvB, b))
	closeDB(t, a)
}

// TestRestoreTransactional writes changelogs inside Kafka transactions, one of them aborted,
// and checks that restore skips the aborted records and finishes on the final commit marker.
func TestRestoreTransactional(t *testing.T) {
	brokers := testenv.Kafka(t)
	id := newID(t, "kv", 0)
	ensure(t, brokers, id, 1)
	ctx := context.Background()
	cl := statetest.Client(t, brokers, kgo.TransactionalID(id.Topic()+"-txn"))
	db := statetest.Open(t)
	kv := mustKV(t, db, id)
	run := func(key string, abort bool) {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		txn := db.NewTxn()
		for i := range 10 {
			_ = kv.Put(txn, fmt.Appendf(nil, "%s%d", key, i), []byte(key))
		}
		if err := txn.Produce(ctx, cl); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(!abort)); err != nil {
			t.Fatal(err)
		}
		if abort {
			txn.Discard()
			return
		}
		if err := txn.Apply(); err != nil {
			t.Fatal(err)
		}
	}
	run("a", false)
	run("x", true)
	run("b", false)
	want := dumpKV(t, kv, db)
	if len(want) != 20 {
		t.Fatalf("store has %d keys, want 20 (aborted writes discarded)", len(want))
	}

	fresh := statetest.Open(t)
	fkv := mustKV(t, fresh, id)
	st, err := fresh.Restore(ctx, restoreCfg(brokers), fkv)
	if err != nil {
		t.Fatal(err)
	}
	equalMaps(t, "restored from transactional changelog", dumpKV(t, fkv, fresh), want)
	if st.Records != 20 {
		t.Fatalf("restore applied %d records, want 20 (aborted ones skipped)", st.Records)
	}
	// Offsets: 10 a + marker, 10 x + abort marker, 10 b + marker = 33.
	if off, _, _ := fkv.Offset(fresh); off != 32 || st.Partitions[0].End != 33 {
		t.Fatalf("restored offset %d with end %d, want 32 and 33 (the last commit marker)", off, st.Partitions[0].End)
	}
}

// TestRestoreMalformed checks that a windowed changelog record too short to hold a window
// start stops restore with an error naming topic, partition and offset.
func TestRestoreMalformed(t *testing.T) {
	brokers := testenv.Kafka(t)
	id := newID(t, "win", 1)
	ensure(t, brokers, id, 2)
	cl := statetest.Client(t, brokers)
	ctx := context.Background()
	good := &kgo.Record{Topic: id.Topic(), Partition: 1, Key: windowKey("k", 10), Value: []byte("v")}
	bad := &kgo.Record{Topic: id.Topic(), Partition: 1, Key: []byte("k1"), Value: []byte("v")}
	if err := cl.ProduceSync(ctx, good, bad).FirstErr(); err != nil {
		t.Fatal(err)
	}
	db := statetest.Open(t)
	w := mustWindow(t, db, id, state.WindowOptions{Size: 1e9})
	_, err := db.Restore(ctx, restoreCfg(brokers), w)
	var me *state.MalformedError
	if !errors.As(err, &me) || !errors.Is(err, state.ErrMalformed) {
		t.Fatalf("restore = %v, want a MalformedError", err)
	}
	if me.Topic != id.Topic() || me.Partition != 1 || me.Offset != 1 {
		t.Fatalf("MalformedError names %s/%d@%d, want %s/1@1", me.Topic, me.Partition, me.Offset, id.Topic())
	}
	t.Log(err)
}

func TestEnsureChangelog(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx := context.Background()
	adm := kadm.NewClient(statetest.Client(t, brokers))
	id := newID(t, "kv", 0)
	if err := state.EnsureChangelog(ctx, adm, id.Topic(), 2, -1, 0); err != nil {
		t.Fatal(err)
	}
	if err := state.EnsureChangelog(ctx, adm, id.Topic(), 2, -1, 0); err != nil {
		t.Fatalf("ensuring an existing, matching changelog: %v", err)
	}
	err := state.EnsureChangelog(ctx, adm, id.Topic(), 4, -1, 0)
	if !errors.Is(err, state.ErrChangelogMismatch) || !strings.Contains(err.Error(), "want 4 partitions, got 2") || !strings.Contains(err.Error(), id.Topic()) {
		t.Fatalf("wrong partition count: %v", err)
	}

	other := newID(t, "kv", 0).Topic()
	del := "delete"
	if _, err := adm.CreateTopic(ctx, 2, -1, map[string]*string{"cleanup.policy": &del}, other); err != nil {
		t.Fatal(err)
	}
	err = state.EnsureChangelog(ctx, adm, other, 2, -1, 0)
	if !errors.Is(err, state.ErrChangelogMismatch) || !strings.Contains(err.Error(), `want cleanup.policy=compact, got "delete"`) {
		t.Fatalf("wrong policy: %v", err)
	}
}
