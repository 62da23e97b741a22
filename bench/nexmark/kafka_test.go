package nexmark

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func uniqueTopics(t *testing.T) Topics {
	var b [4]byte
	rand.Read(b[:])
	p := strings.ReplaceAll(t.Name(), "/", "_") + "-" + hex.EncodeToString(b[:]) + "-"
	return Topics{Person: p + "person", Auction: p + "auction", Bid: p + "bid"}
}

// TestWriteThenConsume writes events to a real Kafka and checks that every partition holds
// exactly the generator's records for it, in event order and byte for byte, with event-time
// timestamps; then that Consume counts them all.
func TestWriteThenConsume(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := WriteConfig{
		Events:  Config{Seed: 42, Events: 20_000, Start: time.Now().Add(-time.Hour).UnixMilli()},
		Brokers: brokers, Topics: uniqueTopics(t), Partitions: 3,
	}
	stats, err := Write(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Events != [3]int64{400, 1200, 18400} {
		t.Errorf("wrote %v events by kind, want [400 1200 18400]", stats.Events)
	}
	if _, err := Write(ctx, cfg); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second Write without Recreate = %v, want ErrTopicExists", err)
	}

	got := readAll(ctx, t, brokers, cfg.Topics.All(), 20_000)
	want := expected(t, cfg)
	for tp, recs := range want {
		if len(got[tp]) != len(recs) {
			t.Fatalf("%v: %d records, want %d", tp, len(got[tp]), len(recs))
		}
		for i, w := range recs {
			g := got[tp][i]
			if !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) || !g.Timestamp.Equal(w.Timestamp) {
				t.Fatalf("%v record %d:\n got %s %s %v\nwant %s %s %v", tp, i, g.Key, g.Value, g.Timestamp, w.Key, w.Value, w.Timestamp)
			}
		}
	}

	cs, err := Consume(ctx, brokers, cfg.Topics.All())
	if err != nil {
		t.Fatal(err)
	}
	if cs.Records != 20_000 || cs.Bytes != stats.Bytes {
		t.Errorf("Consume read %d records, %d bytes; want 20000, %d", cs.Records, cs.Bytes, stats.Bytes)
	}
}

type topicPartition struct {
	topic     string
	partition int32
}

// expected returns the generator's records of cfg by topic and partition, in event order.
func expected(t *testing.T, cfg WriteConfig) map[topicPartition][]*kgo.Record {
	cfg.fillDefaults()
	g, err := NewGenerator(cfg.Events)
	if err != nil {
		t.Fatal(err)
	}
	out := map[topicPartition][]*kgo.Record{}
	for _, r := range encodeChunk(g, cfg, 0, cfg.Events.Events) {
		if p := partition.For(r.Key, cfg.Partitions); p != r.Partition {
			t.Fatalf("key %s in partition %d, partition.For says %d", r.Key, r.Partition, p)
		}
		tp := topicPartition{r.Topic, r.Partition}
		out[tp] = append(out[tp], r)
	}
	return out
}

func readAll(ctx context.Context, t *testing.T, brokers, topics []string, n int) map[topicPartition][]*kgo.Record {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[topicPartition][]*kgo.Record{}
	for seen := 0; seen < n; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records: %v", seen, n, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			tp := topicPartition{r.Topic, r.Partition}
			out[tp] = append(out[tp], r)
			seen++
		})
	}
	return out
}
