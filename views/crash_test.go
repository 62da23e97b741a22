package views

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tarnhq/tarn/state"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// crashView counts events per symbol after repartitioning by symbol, so both sub-topologies
// (and the repartition topic) are in play when an instance dies.
func crashView(in string) (*View, error) {
	return Define("counts", func(b *Builder) {
		g := GroupBy(Source(b, in, JSON[trade]()), "by-symbol", bySymbol)
		Count(g, "count").Serve()
	})
}

// TestKafkaChildInstance is the body of the instances TestKafkaKillInstance starts by
// re-executing the test binary; run directly, without TARN_VIEWS_CHILD, it returns at once.
func TestKafkaChildInstance(t *testing.T) {
	if os.Getenv("TARN_VIEWS_CHILD") == "" {
		return
	}
	v, err := crashView(os.Getenv("TARN_VIEWS_IN"))
	must(t, err)
	db, err := state.Open(state.Config{Dir: os.Getenv("TARN_VIEWS_DIR"), MemoryBytes: 64 << 20, Logger: quietLog()})
	must(t, err)
	defer db.Close()
	rt, err := NewRuntime(Config{
		App: os.Getenv("TARN_VIEWS_APP"), Brokers: []string{os.Getenv(envBrokers)}, State: db, Views: []*View{v},
		ExactlyOnce: os.Getenv("TARN_VIEWS_EOS") == "1", MaxPollRecords: 500, TransactionTimeout: 10 * time.Second,
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		ClientOpts: []kgo.Opt{kgo.MetadataMinAge(250 * time.Millisecond), kgo.SessionTimeout(6 * time.Second)},
	})
	must(t, err)
	must(t, rt.Run(context.Background()))
}

const envBrokers = "TARN_TEST_KAFKA_BROKERS"

func TestKafkaKillInstance(t *testing.T) {
	for _, eos := range []bool{false, true} {
		t.Run(map[bool]string{false: "at-least-once", true: "exactly-once"}[eos], func(t *testing.T) { killInstance(t, eos) })
	}
}

// killInstance runs two instances, SIGKILLs one while records still arrive, and checks the
// surviving instance's final view against counts computed here.
func killInstance(t *testing.T, eos bool) {
	k := newKafkaEnv(t)
	in := k.topic("events", 4)
	const n, symbols = 20000, 40
	want := map[string]int64{}
	var first, second []*kgo.Record
	for i := range n {
		tr := trade{Symbol: "S" + strconv.Itoa(i%symbols), Qty: i}
		want[tr.Symbol]++
		r := jsonRecord(in, "e"+strconv.Itoa(i), int64(i), tr)
		if i < n/2 {
			first = append(first, r)
		} else {
			second = append(second, r)
		}
	}
	k.produce(first...)
	start := func(name string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKafkaChildInstance$")
		cmd.Env = append(os.Environ(), "TARN_VIEWS_CHILD=1", "TARN_VIEWS_IN="+in, "TARN_VIEWS_APP="+k.app,
			"TARN_VIEWS_DIR="+t.TempDir(), envBrokers+"="+k.brokers[0], "TARN_VIEWS_EOS="+map[bool]string{true: "1"}[eos])
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		must(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	victim := start("a")
	start("b")
	v, err := crashView(in)
	must(t, err)
	group := k.app + ".counts.v1"
	eventually(t, func() error {
		if committed(k.adm, group, in) < n/4 {
			return errNotYet
		}
		return nil
	})
	k.produce(second...)
	must(t, victim.Process.Signal(syscall.SIGKILL))
	_ = victim.Wait()
	eventually(t, func() error {
		if c := committed(k.adm, group, in); c < n {
			return fmt.Errorf("committed %d of %d input records", c, n)
		}
		return nil
	})
	// The view's final state is the latest value per key of its changelog (read_committed).
	changelog := k.app + ".counts.v1.count.changelog"
	got := map[string]int64{}
	eventually(t, func() error {
		for _, r := range k.readEnd(changelog) {
			var c int64
			must(t, json.Unmarshal(r.Value, &c))
			got[string(r.Key)] = c
		}
		for sym, w := range want {
			if got[sym] < w {
				return fmt.Errorf("symbol %s counted %d, want %d (fingerprint %s)", sym, got[sym], w, v.Fingerprint()[:8])
			}
		}
		return nil
	})
	for sym, w := range want {
		if eos && got[sym] != w {
			t.Errorf("exactly-once: symbol %s counted %d, want exactly %d", sym, got[sym], w)
		}
	}
}

// committed sums a group's committed offsets on topic.
func committed(adm *kadm.Client, group, topic string) int64 {
	offs, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		return 0
	}
	var sum int64
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil {
			sum += o.At
		}
	})
	return sum
}

// readEnd reads a topic from the start to its current end, read_committed.
func (k *kafkaEnv) readEnd(topic string) []*kgo.Record {
	ends, err := k.adm.ListEndOffsets(context.Background(), topic)
	must(k.t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	must(k.t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []*kgo.Record
	reached := map[int32]int64{}
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return out
		}
		out = append(out, fs.Records()...)
		done := true
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 {
				reached[p.Partition] = p.Records[len(p.Records)-1].Offset + 1
			}
		})
		ends.Each(func(o kadm.ListedOffset) { done = done && reached[o.Partition] >= o.Offset-1 })
		if done {
			return out
		}
	}
}
