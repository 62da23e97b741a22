package serve_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/internal/topic"
	"github.com/tarnhq/tarn/serve"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// kafkaView feeds a pebbleView from a real Kafka topic of 2 partitions, as the views runtime
// would: each record is applied at its own offset (the producer's default partitioner and
// the view's agree, so the view's offsets are the topic's).
func kafkaView(t *testing.T) (*pebbleView, *kgo.Client, *httptest.Server) {
	t.Helper()
	brokers := testenv.Kafka(t)
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name := topic.CDCTable("servetest"+hex.EncodeToString(suffix), "public", "orders")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(name), kgo.ConsumeTopics(name),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(250*time.Millisecond),
		kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, err := kadm.NewClient(cl).CreateTopic(t.Context(), 2, 1, nil, name); err != nil {
		t.Fatal(err)
	}
	b := newPebbleBackend(t)
	v := b.addView("orders", 2, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				c, err := v.applyJSON(r.Key, r.Value, 0)
				if err != nil || c.Partition != r.Partition || c.Offset != r.Offset {
					t.Errorf("record %d/%d applied as %d/%d: %v", r.Partition, r.Offset, c.Partition, c.Offset, err)
				}
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return v, cl, start(t, b)
}

func produce(t *testing.T, cl *kgo.Client, key, value string) *kgo.Record {
	t.Helper()
	r, err := cl.ProduceSync(t.Context(), &kgo.Record{Key: []byte(key), Value: []byte(value)}).First()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestKafkaRecordReachesWatcherAndReconnectLosesNothing(t *testing.T) {
	_, cl, ts := kafkaView(t)
	c := openSSE(t, ts.URL+"/v1/views/orders/changes", nil)
	if ev, _ := c.next(t); ev.name != "progress" {
		t.Fatalf("first event %s", ev.name)
	}
	got := newChangeLog(t)
	want := map[string]string{}
	var lastID string
	var slowest time.Duration
	for i := range 5 {
		k, val := fmt.Sprintf("o-%d", i), fmt.Sprintf(`{"n":%d}`, i)
		began := time.Now()
		produce(t, cl, k, val)
		d, ev, ok := c.nextChange(t)
		if !ok || d.Key != k || string(d.Value) != val {
			t.Fatalf("event %+v (%s), want %s=%s", d, ev.name, k, val)
		}
		slowest = max(slowest, time.Since(began))
		got.add(d)
		want[k+"="+val] = ""
		lastID = ev.id
	}
	t.Logf("produce to SSE event: slowest of 5 took %s", slowest)
	c.close()
	var last *kgo.Record
	for i := 5; i < 15; i++ {
		k, val := fmt.Sprintf("o-%d", i), fmt.Sprintf(`{"n":%d}`, i)
		last = produce(t, cl, k, val)
		want[k+"="+val] = ""
	}
	// Read your writes: the read waits until the view has applied the last record.
	minOffsets := fmt.Sprintf("min_offsets=%d:%d", last.Partition, last.Offset)
	var body valueBody
	get(t, keyURL(ts.URL, "orders", "o-14", minOffsets, "wait=20s")).want(t, http.StatusOK).decode(t, &body)
	if string(body.Value) != `{"n":14}` || body.Position.Offsets[last.Partition] != last.Offset+1 {
		t.Fatalf("read-your-writes read %s at %v", body.Value, body.Position.Offsets)
	}
	// The reconnect from the last position gets the 10 records produced meanwhile, once each.
	c = openSSE(t, ts.URL+"/v1/views/orders/changes", http.Header{"Last-Event-ID": {lastID}})
	for len(got.seen) < 15 {
		d, ev, ok := c.nextChange(t)
		if !ok {
			t.Fatalf("stream ended with %s", ev.name)
		}
		got.add(d)
	}
	pos, err := serve.ParsePosition(lastID)
	if err != nil {
		t.Fatal(err)
	}
	if len(pos.Offsets) != 2 {
		t.Fatalf("event id %v does not cover both partitions", pos.Offsets)
	}
	waitUntil(t, func() bool { return len(got.seen) == len(want) })
	for k := range want {
		if _, ok := got.seen[k]; !ok {
			t.Fatalf("lost %s", k)
		}
	}
}
