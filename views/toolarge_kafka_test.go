package views

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/tarnhq/tarn/state"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRefusedForSizeIsDeadLettered: when Kafka refuses a record for its size although it is
// within the limit the runtime read at start (the output topic's max.message.bytes was
// lowered while it ran), the runtime reads the limits again and redoes the batch, which then
// dead-letters the record; the view goes on, and is not retried for ever.
func TestRefusedForSizeIsDeadLettered(t *testing.T) {
	k := newKafkaEnv(t)
	ctx := context.Background()
	in, out := k.app+"-in", k.app+"-out"
	inLimit, keep := strconv.Itoa(4<<20), "-1"
	if _, err := k.adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &inLimit, "retention.ms": &keep}, in); err != nil {
		t.Fatal(err)
	}
	k.parts[in] = 1
	v, err := Define("copy", func(b *Builder) {
		Source(b, in, JSON[string]()).To(out, JSON[string]())
	})
	must(t, err)
	db, err := state.Open(state.Config{Dir: t.TempDir(), MemoryBytes: 64 << 20, Logger: quietLog()})
	must(t, err)
	defer db.Close()
	rt, err := NewRuntime(Config{App: k.app, Brokers: k.brokers, State: db, Views: []*View{v}, Logger: quietLog(),
		ClientOpts: []kgo.Opt{kgo.MetadataMinAge(250 * time.Millisecond)}})
	must(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runtime: %v", err)
		}
	}()
	k.produce(jsonRecord(in, "first", 1, "small"))
	k.readAll(out, 1) // the runtime runs and created out with the default limit

	lowered := strconv.Itoa(1 << 20)
	if _, err := k.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &lowered}}, out); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		rcs, err := k.adm.DescribeTopicConfigs(ctx, out)
		if err != nil {
			return err
		}
		for _, c := range rcs[0].Configs {
			if c.Key == "max.message.bytes" && c.MaybeValue() != lowered {
				return fmt.Errorf("max.message.bytes of %s is still %s", out, c.MaybeValue())
			}
		}
		return nil
	})
	big := jsonRecord(in, "big", 2, strings.Repeat("x", 2<<20))
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.ProducerBatchMaxBytes(4<<20))
	must(t, err)
	defer cl.Close()
	must(t, cl.ProduceSync(ctx, big).FirstErr()) // one partition: the default partitioner will do
	k.produce(jsonRecord(in, "later", 3, "small"))
	// At least once: "first" may come twice, if its offset commit had not landed.
	for n := 2; ; n++ {
		keys := map[string]bool{}
		for _, r := range k.readAll(out, n) {
			keys[string(r.Key)] = true
		}
		if keys["big"] {
			t.Fatal("the record above the lowered limit was produced")
		}
		if keys["later"] {
			break
		}
	}
	var dead *kgo.Record
	for _, r := range k.readAll(topic.DLQ(k.app), 1) {
		if string(r.Key) == "big" {
			dead = r
		}
	}
	if dead == nil {
		t.Fatal("no dead letter of big")
	}
	h := headers(dead)
	if h["tarn.reason"] != "too-large" || h["tarn.limit"] != strconv.Itoa(1<<20-1024) || h["tarn.target"] != out {
		t.Errorf("dead letter headers %v", h)
	}
}
