package state_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/state"
)

// A task's batch: read-modify-write through a Txn, produce the changelog records, then apply
// them once Kafka acknowledged them.
func Example() {
	ctx := context.Background()
	kafka, _ := kfake.NewCluster(kfake.NumBrokers(1))
	defer kafka.Close()
	cl, _ := kgo.NewClient(kgo.SeedBrokers(kafka.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()

	db, err := state.Open(state.Config{Dir: "/data", FS: vfs.NewMem(), MemoryBytes: 32 << 20,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	id := state.ID{App: "shop", View: "orders_per_user", Version: 1, Store: "counts", Partition: 0}
	if err := state.EnsureChangelog(ctx, kadm.NewClient(cl), id.Topic(), 1, -1, 0); err != nil {
		fmt.Println(err)
		return
	}
	counts, _ := db.KV(id)
	if _, err := db.Restore(ctx, state.RestoreConfig{Client: []kgo.Opt{kgo.SeedBrokers(kafka.ListenAddrs()...)}}, counts); err != nil {
		fmt.Println(err)
		return
	}

	txn := db.NewTxn()
	for _, user := range []string{"ann", "bob", "ann"} {
		v, _, _ := counts.Get(txn, []byte(user)) // sees this batch's own writes
		n, _ := strconv.Atoi(string(v))
		_ = counts.Put(txn, []byte(user), []byte(strconv.Itoa(n+1)))
	}
	if err := txn.Produce(ctx, cl); err != nil { // one record per key, to partition 0
		fmt.Println(err)
		return
	}
	if err := txn.Apply(); err != nil { // data and offset in one Pebble batch
		fmt.Println(err)
		return
	}
	ann, _, _ := counts.Get(db, []byte("ann"))
	off, _, _ := counts.Offset(db)
	fmt.Printf("ann=%s offset=%d\n", ann, off)
	// Output: ann=2 offset=1
}
