package views

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/state"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaEnv is one integration test's view of the shared real broker: a unique app id and
// helpers to make topics, produce and read.
type kafkaEnv struct {
	t       testing.TB
	brokers []string
	app     string
	cl      *kgo.Client
	adm     *kadm.Client
	parts   map[string]int32
}

func newKafkaEnv(t testing.TB) *kafkaEnv {
	brokers := testenv.Kafka(t)
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	app := strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()) + "-" + hex.EncodeToString(suffix)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(250*time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &kafkaEnv{t: t, brokers: brokers, app: app, cl: cl, adm: kadm.NewClient(cl), parts: map[string]int32{}}
}

// topic creates a topic named after the app and returns its name.
func (k *kafkaEnv) topic(name string, partitions int32) string {
	full := k.app + "-" + name
	k.create(full, partitions)
	return full
}

func (k *kafkaEnv) create(name string, partitions int32) {
	// Test records have timestamps near 1970: without this, retention deletes them at once.
	keep := "-1"
	resp, err := k.adm.CreateTopic(context.Background(), partitions, 1, map[string]*string{"retention.ms": &keep}, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		k.t.Fatalf("create %s: %v", name, err)
	}
	// Known now: a metadata request right after creation can miss the new topic.
	k.parts[name] = partitions
}

// produce sends records keyed by key to partition.For(key) and waits for the acks.
func (k *kafkaEnv) produce(rs ...*kgo.Record) {
	for _, r := range rs {
		n := k.partitionsOf(r.Topic)
		if r.Partition < 0 || r.Partition >= n {
			r.Partition = partition.For(r.Key, n)
		}
	}
	if err := k.cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		k.t.Fatal(err)
	}
}

func (k *kafkaEnv) partitionsOf(topic string) int32 {
	if n, ok := k.parts[topic]; ok {
		return n
	}
	// A topic the runtime created a moment ago can take a while to show in metadata.
	deadline := time.Now().Add(15 * time.Second)
	for {
		td, err := k.adm.ListTopics(context.Background(), topic)
		if err == nil && td[topic].Err == nil && len(td[topic].Partitions) > 0 {
			k.parts[topic] = int32(len(td[topic].Partitions))
			return k.parts[topic]
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("list %s: %v %v", topic, err, td[topic].Err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func jsonRecord(topic, key string, ts int64, v any) *kgo.Record {
	raw, _ := json.Marshal(v)
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: raw, Timestamp: time.UnixMilli(ts), Partition: -1}
}

// readAll reads a topic from the start (read_committed) until it has seen want records or
// the deadline passes.
func (k *kafkaEnv) readAll(topic string, want int) []*kgo.Record {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		k.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			k.t.Fatalf("read %s: got %d records, want %d", topic, len(out), want)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// runtime starts a runtime over a fresh state DB in a temp dir; it stops when the test ends.
func (k *kafkaEnv) runtime(cfg Config) *Runtime {
	k.t.Helper()
	if cfg.State == nil {
		db, err := state.Open(state.Config{Dir: k.t.TempDir(), MemoryBytes: 64 << 20, Logger: quietLog()})
		if err != nil {
			k.t.Fatal(err)
		}
		k.t.Cleanup(func() { _ = db.Close() })
		cfg.State = db
	}
	cfg.App, cfg.Brokers = k.app, k.brokers
	cfg.ClientOpts = append(cfg.ClientOpts, kgo.MetadataMinAge(250*time.Millisecond))
	if cfg.Logger == nil {
		cfg.Logger = quietLog()
		if testing.Verbose() {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
		}
	}
	rt, err := NewRuntime(cfg)
	if err != nil {
		k.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	k.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			k.t.Errorf("runtime: %v", err)
		}
	})
	return rt
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// eventually retries check until it returns nil, failing the test with its last error after
// a minute; it waits for asynchronous processing, it does not time anything.
func eventually(t *testing.T, check func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var errNotYet = errors.New("not yet")
