package views

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaCommitsKeepUp feeds an at-least-once count view with small batches (many commits)
// while records keep arriving, and samples how far the group's committed offsets trail the
// input's end; once the input stops and the view has counted everything, the committed
// offsets must reach the end (no queue of commits still draining). It prints the gaps; the
// bound it checks is only that the commits catch up at all.
func TestKafkaCommitsKeepUp(t *testing.T) {
	k := newKafkaEnv(t)
	in := k.topic("events", 3)
	v, err := crashView(in)
	must(t, err)
	reg := prometheus.NewRegistry()
	rt := k.runtime(Config{Views: []*View{v}, MaxPollRecords: 200, Registerer: reg})
	group := topic.Group(k.app, "counts", 1)

	const n, symbols = 60000, 30
	var (
		wg       sync.WaitGroup
		produced sync.WaitGroup
	)
	produced.Add(1)
	go func() {
		defer produced.Done()
		for i := 0; i < n; i += 1000 {
			var rs []*kgo.Record
			for j := i; j < i+1000; j++ {
				rs = append(rs, jsonRecord(in, "e"+strconv.Itoa(j), int64(j), trade{Symbol: "S" + strconv.Itoa(j%symbols), Qty: j}))
			}
			k.produce(rs...)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	committedSum := func() int64 {
		offs, err := k.adm.FetchOffsets(context.Background(), group)
		if err != nil {
			return -1
		}
		var sum int64
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Topic == in {
				sum += o.At
			}
		})
		return sum
	}
	counted := func() int64 {
		var sum int64
		for i := range symbols {
			raw, _, err := rt.Get(context.Background(), "counts", "S"+strconv.Itoa(i))
			if err == nil {
				c, _ := strconv.ParseInt(string(raw), 10, 64)
				sum += c
			}
		}
		return sum
	}
	stop := make(chan struct{})
	var maxGap int64
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if g := uncommitted(reg); g > maxGap {
				maxGap = g
			}
		}
	})
	produced.Wait()
	eventually(t, func() error {
		if got := counted(); got < n {
			return fmt.Errorf("counted %d of %d", got, n)
		}
		return nil
	})
	countedAt := time.Now()
	eventually(t, func() error {
		if c := committedSum(); c != n {
			return fmt.Errorf("committed offsets sum to %d, want %d", c, n)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	t.Logf("at least once, batches of 200: at most %d applied input records were not yet committed (tarn_views_uncommitted_records) while %d arrived; the commits reached the end %s after the last record was counted",
		maxGap, n, time.Since(countedAt).Round(time.Millisecond))
}

// uncommitted reads the tarn_views_uncommitted_records gauge (summed over views).
func uncommitted(reg *prometheus.Registry) int64 {
	mfs, _ := reg.Gather()
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "tarn_views_uncommitted_records" {
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return int64(sum)
}

// TestKafkaLagCountsWhatIsNotApplied produces a backlog to a slowed view and samples its lag:
// whenever the lag reads 0 on every partition it runs, every record must already be
// counted (lag is measured against what is applied and queryable, not against fetches the
// client buffered long ago). It prints the largest lag seen.
func TestKafkaLagCountsWhatIsNotApplied(t *testing.T) {
	k := newKafkaEnv(t)
	in := k.topic("events", 3)
	v, err := Define("counts", func(b *Builder) {
		slowed := Map(Source(b, in, JSON[trade]()), "slowly", func(_ string, tr trade) trade {
			time.Sleep(100 * time.Microsecond)
			return tr
		})
		Count(GroupBy(slowed, "by-symbol", bySymbol), "count").Serve()
	})
	must(t, err)
	const n, symbols = 20000, 10
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, jsonRecord(in, "e"+strconv.Itoa(i), int64(i), trade{Symbol: "S" + strconv.Itoa(i%symbols), Qty: i}))
	}
	k.produce(rs...)
	rt := k.runtime(Config{Views: []*View{v}, MaxPollRecords: 500})
	counted := func() int64 {
		var sum int64
		for i := range symbols {
			if raw, _, err := rt.Get(context.Background(), "counts", "S"+strconv.Itoa(i)); err == nil {
				c, _ := strconv.ParseInt(string(raw), 10, 64)
				sum += c
			}
		}
		return sum
	}
	var maxLag int64
	eventually(t, func() error {
		info, err := rt.Info("counts")
		if err != nil {
			return err
		}
		var lag int64
		for _, l := range info.Lag {
			lag += l
		}
		maxLag = max(maxLag, lag)
		done := counted()
		// Every partition measured: 3 of the input, 3 of the repartition topic.
		if len(info.Lag) == 6 && lag == 0 && done < n {
			t.Fatalf("lag read 0 on %d partitions while %d of %d records were counted", len(info.Lag), done, n)
		}
		if done < n || lag != 0 {
			return fmt.Errorf("counted %d of %d, lag %d", done, n, lag)
		}
		return nil
	})
	t.Logf("largest lag seen: %d records (of %d produced up front)", maxLag, n)
}

// TestKafkaWatchdogShowsAStall blocks a view's code on one record: once no batch was applied
// for StallTimeout while input waits, the view shows failing ("stalled"); when the code
// returns, the view goes on and counts everything, and the failure clears.
func TestKafkaWatchdogShowsAStall(t *testing.T) {
	k := newKafkaEnv(t)
	in := k.topic("events", 1)
	release := make(chan struct{})
	var once sync.Once
	v, err := Define("counts", func(b *Builder) {
		blocked := Map(Source(b, in, JSON[trade]()), "blocks", func(key string, tr trade) trade {
			if key == "block" {
				once.Do(func() { <-release })
			}
			return tr
		})
		Count(GroupBy(blocked, "by-symbol", bySymbol), "count").Serve()
	})
	must(t, err)
	rt := k.runtime(Config{Views: []*View{v}, MaxPollRecords: 10, StallTimeout: 2 * time.Second})
	var rs []*kgo.Record
	rs = append(rs, jsonRecord(in, "block", 0, trade{Symbol: "S", Qty: 1}))
	for i := range 99 {
		rs = append(rs, jsonRecord(in, "e"+strconv.Itoa(i), int64(i+1), trade{Symbol: "S", Qty: 1}))
	}
	k.produce(rs...)
	eventually(t, func() error {
		info, err := rt.Info("counts")
		if err != nil {
			return err
		}
		if !strings.Contains(info.Failing, "stalled") {
			return fmt.Errorf("failing = %q, want stalled", info.Failing)
		}
		return nil
	})
	close(release)
	eventually(t, func() error {
		raw, _, err := rt.Get(context.Background(), "counts", "S")
		if err != nil {
			return err
		}
		info, _ := rt.Info("counts")
		if string(raw) != "100" || info.Failing != "" {
			return fmt.Errorf("count %s, failing %q", raw, info.Failing)
		}
		return nil
	})
}
