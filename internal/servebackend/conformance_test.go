package servebackend_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/internal/servebackend"
	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/serve"
	"github.com/tarnhq/tarn/serve/servetest"
	"github.com/tarnhq/tarn/state"
	"github.com/tarnhq/tarn/views"
)

// kafkaHarness is a views runtime on the real Kafka, serving a table read from a topic of
// its own, behind the adapter under test.
type kafkaHarness struct {
	be      *servebackend.Backend
	topic   string
	parts   int32
	cl      *kgo.Client
	stopRun context.CancelFunc
}

const partitions = 3

func newKafkaHarness(t *testing.T) *kafkaHarness {
	brokers := testenv.Kafka(t)
	app := newApp("servebackend")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(250*time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	h := &kafkaHarness{topic: app + "-rows", parts: partitions, cl: cl}
	keep := "-1"
	resp, err := kadm.NewClient(cl).CreateTopic(context.Background(), partitions, 1, map[string]*string{"retention.ms": &keep}, h.topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create %s: %v", h.topic, err)
	}

	v, err := views.Define("conformance", func(b *views.Builder) {
		views.TableSource(b, h.topic, views.JSON[json.RawMessage]()).Serve()
	})
	if err != nil {
		t.Fatal(err)
	}
	h.be, h.stopRun = start(t, app, brokers, v, servebackend.Config{})
	return h
}

// start runs v on a views runtime on brokers, behind a backend configured by cfg (its Runtime
// and Logger filled in here), until the test ends; stop ends the backend's Run.
func start(t *testing.T, app string, brokers []string, v *views.View, cfg servebackend.Config) (be *servebackend.Backend, stop context.CancelFunc) {
	t.Helper()
	log := quietLog()
	db, err := state.Open(state.Config{Dir: t.TempDir(), MemoryBytes: 64 << 20, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	rt, err := views.NewRuntime(views.Config{App: app, Brokers: brokers, State: db, Views: []*views.View{v},
		Logger: log, ClientOpts: []kgo.Opt{kgo.MetadataMinAge(250 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Runtime, cfg.Logger = rt, log
	if be, err = servebackend.New(cfg); err != nil {
		t.Fatal(err)
	}
	rtCtx, stopRuntime := context.WithCancel(context.Background())
	runCtx, stopRun := context.WithCancel(context.Background())
	rtDone, runDone := make(chan error, 1), make(chan error, 1)
	go func() { rtDone <- rt.Run(rtCtx) }()
	go func() { runDone <- be.Run(runCtx) }()
	t.Cleanup(func() {
		stopRun()
		if err := <-runDone; err != nil {
			t.Errorf("backend: %v", err)
		}
		stopRuntime()
		if err := <-rtDone; err != nil {
			t.Errorf("runtime: %v", err)
		}
	})
	return be, stopRun
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newApp names a test's app, unique on the shared broker.
func newApp(prefix string) string {
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	return prefix + "-" + hex.EncodeToString(suffix)
}

func (h *kafkaHarness) Backend() serve.Backend { return h.be }
func (h *kafkaHarness) View() string           { return "conformance" }
func (h *kafkaHarness) Stop(testing.TB)        { h.stopRun() }

// Write produces key's row (a tombstone for nil) to the partition the view reads it from.
func (h *kafkaHarness) Write(t testing.TB, key string, value json.RawMessage) {
	t.Helper()
	r := &kgo.Record{Topic: h.topic, Key: []byte(key), Value: value, Partition: partition.For([]byte(key), h.parts)}
	if err := h.cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// TestKafkaConformance holds the adapter, on a views runtime that reads a real Kafka, to the
// contract serve's fake keeps.
func TestKafkaConformance(t *testing.T) {
	servetest.Conformance(t, newKafkaHarness(t))
}
