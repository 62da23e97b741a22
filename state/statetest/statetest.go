// Package statetest gives other packages' tests a [state.DB] on an in-memory file system and,
// for unit tests, an in-process Kafka (kfake) with a client configured as state needs.
//
// # Invariants
//
//   - Everything Open and Kafka start is closed by tb.Cleanup; nothing touches the disk.
package statetest

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/state"
)

// Open opens a DB on vfs.NewMem with a 32 MiB budget and a silent logger; it is closed when
// the test ends.
func Open(tb testing.TB) *state.DB {
	tb.Helper()
	db, err := state.Open(state.Config{
		Dir:         "/tarn-data",
		FS:          vfs.NewMem(),
		MemoryBytes: 32 << 20,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		tb.Fatalf("statetest: open: %v", err)
	}
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("statetest: close: %v", err)
		}
	})
	return db
}

// Kafka starts an in-process kfake cluster of one broker and returns its address.
func Kafka(tb testing.TB, opts ...kfake.Opt) []string {
	tb.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		tb.Fatalf("statetest: kfake: %v", err)
	}
	tb.Cleanup(c.Close)
	return c.ListenAddrs()
}

// ClientOpts are the options of a client for state in tests: the seeds, the manual
// partitioner [state.Txn.Produce] needs, and fast metadata refreshes.
func ClientOpts(brokers []string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(250 * time.Millisecond),
	}
}

// Client returns a client built from ClientOpts plus opts, closed when the test ends.
func Client(tb testing.TB, brokers []string, opts ...kgo.Opt) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(append(ClientOpts(brokers), opts...)...)
	if err != nil {
		tb.Fatalf("statetest: client: %v", err)
	}
	tb.Cleanup(cl.Close)
	return cl
}
