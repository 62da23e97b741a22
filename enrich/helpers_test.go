package enrich_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/state"
	"github.com/tarnhq/tarn/views"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// kafkaEnv is one test's view of the shared real broker: a unique app id and helpers to make
// topics, produce, read and run views.
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
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name()))
	app := name[:min(len(name), 40)] + "-" + hex.EncodeToString(suffix)
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
	// Test records may carry old timestamps: without this, retention would delete them.
	keep := "-1"
	resp, err := k.adm.CreateTopic(context.Background(), partitions, 1, map[string]*string{"retention.ms": &keep}, full)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		k.t.Fatalf("create %s: %v", full, err)
	}
	return full
}

// produce sends records to partition.For(key) (unless a partition is set) and waits.
func (k *kafkaEnv) produce(rs ...*kgo.Record) {
	for _, r := range rs {
		if n := k.partitionsOf(r.Topic); r.Partition < 0 || r.Partition >= n {
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
	td, err := k.adm.ListTopics(context.Background(), topic)
	if err != nil || td[topic].Err != nil {
		k.t.Fatalf("list %s: %v %v", topic, err, td[topic].Err)
	}
	k.parts[topic] = int32(len(td[topic].Partitions))
	return k.parts[topic]
}

func jsonRecord(topic, key string, ts time.Time, v any) *kgo.Record {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(key), Value: raw, Timestamp: ts, Partition: -1}
}

// reader reads a topic from the start, read_committed, across calls.
type reader struct {
	t  testing.TB
	cl *kgo.Client
}

func (k *kafkaEnv) reader(topic string) *reader {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.MetadataMinAge(250*time.Millisecond), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(cl.Close)
	return &reader{t: k.t, cl: cl}
}

// read returns the next n records, failing the test after a minute without them.
func (r *reader) read(n int) []*kgo.Record {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := r.cl.PollRecords(ctx, n-len(out))
		if ctx.Err() != nil {
			r.t.Fatalf("got %d records, want %d", len(out), n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// quiet reads for d and returns what arrived: to check that nothing more comes.
func (r *reader) quiet(d time.Duration) []*kgo.Record {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out []*kgo.Record
	for ctx.Err() == nil {
		out = append(out, r.cl.PollFetches(ctx).Records()...)
	}
	return out
}

// running is a runtime running in the background until stop or the end of the test.
type running struct {
	rt     *views.Runtime
	cancel context.CancelFunc
	done   chan error
}

func (r *running) stop(t testing.TB) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	if err := <-r.done; err != nil {
		t.Errorf("runtime: %v", err)
	}
}

// runtime starts a runtime of the views over a fresh state DB in its own temp dir.
func (k *kafkaEnv) runtime(vs ...*views.View) *running {
	k.t.Helper()
	db, err := state.Open(state.Config{Dir: k.t.TempDir(), MemoryBytes: 64 << 20, Logger: quietLog()})
	if err != nil {
		k.t.Fatal(err)
	}
	logger := quietLog()
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	rt, err := views.NewRuntime(views.Config{App: k.app, Brokers: k.brokers, State: db, Views: vs, Logger: logger,
		ClientOpts: []kgo.Opt{kgo.MetadataMinAge(250 * time.Millisecond), kgo.FetchMaxWait(200 * time.Millisecond)}})
	if err != nil {
		k.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{rt: rt, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- rt.Run(ctx) }()
	k.t.Cleanup(func() {
		r.stop(k.t)
		_ = db.Close()
	})
	return r
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// eventually retries check until it returns nil, failing with its last error after a minute;
// it waits for asynchronous processing, it times nothing.
func eventually(t testing.TB, check func() error) {
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

func headers(r *kgo.Record) map[string]string {
	h := map[string]string{}
	for _, x := range r.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}

// diff lists the first differences between two maps, for failure messages.
func diff[K comparable, V comparable](got, want map[K]V) []string {
	var d []string
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			d = append(d, fmt.Sprintf("%v: got %v want %v", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("%v: unexpected %v", k, g))
		}
	}
	sort.Strings(d)
	return d[:min(len(d), 8)]
}
