package state_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/state"
	"github.com/tarnhq/tarn/state/statetest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newID returns a store ID whose changelog topic no other test uses.
func newID(t testing.TB, store string, partition int32) state.ID {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return state.ID{App: "test", View: "v" + hex.EncodeToString(b[:]), Version: 1, Store: store, Partition: partition}
}

// ensure creates id's changelog topic with partitions partitions.
func ensure(t testing.TB, brokers []string, id state.ID, partitions int32) {
	t.Helper()
	cl := statetest.Client(t, brokers)
	if err := state.EnsureChangelog(context.Background(), kadm.NewClient(cl), id.Topic(), partitions, -1, 0); err != nil {
		t.Fatal(err)
	}
}

func restoreCfg(brokers []string) state.RestoreConfig {
	return state.RestoreConfig{Client: []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(250 * time.Millisecond)}}
}

// commit produces t's writes with cl and applies them.
func commit(t testing.TB, txn *state.Txn, cl *kgo.Client) {
	t.Helper()
	if err := txn.Produce(context.Background(), cl); err != nil {
		t.Fatal(err)
	}
	if err := txn.Apply(); err != nil {
		t.Fatal(err)
	}
}

// dumpKV reads every key of kv as r sees it.
func dumpKV(t testing.TB, kv *state.KV, r state.Reader) map[string]string {
	t.Helper()
	it, err := kv.Range(r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]string)
	for it.Next() {
		m[string(it.Key())] = string(it.Value())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return m
}

// readChangelog returns the latest value of every key of a changelog partition up to its
// last stable offset (read_committed), as restore should see it.
func readChangelog(t testing.TB, brokers []string, topic string, partition int32) map[string]string {
	t.Helper()
	ctx := context.Background()
	adm := kadm.NewClient(statetest.Client(t, brokers))
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, partition)
	m := make(map[string]string)
	if end.Offset == 0 {
		return m
	}
	cl := statetest.Client(t, brokers, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	for {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= end.Offset-1 {
				done = true
			}
			if r.Offset >= end.Offset || r.Attrs.IsControl() {
				return
			}
			if r.Value == nil {
				delete(m, string(r.Key))
			} else {
				m[string(r.Key)] = string(r.Value)
			}
		})
		if done {
			return m
		}
	}
}

func equalMaps(t testing.TB, what string, got, want map[string]string) {
	t.Helper()
	bad := 0
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			if bad < 5 {
				t.Errorf("%s: key %q = %q (present %v), want %q", what, k, g, ok, w)
			}
			bad++
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			if bad < 5 {
				t.Errorf("%s: extra key %q = %q", what, k, g)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d keys differ (got %d keys, want %d)", what, bad, len(got), len(want))
	}
}
