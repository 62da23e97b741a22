package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/internal/topic"
)

// TestServeThreeInstances runs three `tarn serve` instances of one app under about 2000
// trades a second while a reader loops over every key through the instance that stays.
//
// SIGTERM one: it keeps answering until it has handed its partitions over and left the
// groups, so reads of its keys wait for the new owner rather than fail (no read may fail),
// and a live watch of one of its keys ends with an end event saying why. SIGKILL another and
// start it again at once on its data folder: being the same static member, it takes its
// partitions back without waiting for its session to expire, and its keys are served again
// within seconds. The counts stay complete, and a client following the view's changes through
// the stopped instance, resuming through the one that stays, receives every change once.
func TestServeThreeInstances(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	brokers := testenv.Kafka(t)
	pg := testenv.Postgres(t)
	bin := buildTarn(t)
	app := fmt.Sprintf("ho%d", time.Now().UnixNano()%1e9)
	migrate(ctx, t, pg)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	createEventTopics(ctx, t, brokers)
	symbols := make([]string, 12)
	for i := range symbols {
		symbols[i] = fmt.Sprintf("H%s-%d", app, i)
	}
	var produced atomic.Int64
	trade := func(i int) *kgo.Record {
		sym := symbols[i%len(symbols)]
		v, _ := json.Marshal(map[string]any{"id": fmt.Sprint(i), "symbol": sym, "price": 100 + i%13, "qty": 1, "time": time.Now().UTC()})
		return &kgo.Record{Topic: "trades", Key: []byte(sym), Value: v}
	}
	for i := range len(symbols) {
		if err := cl.ProduceSync(ctx, trade(i)).FirstErr(); err != nil {
			t.Fatal(err)
		}
		produced.Add(1)
	}

	args := []string{"--app", app, "--kafka", strings.Join(brokers, ","), "--postgres", pg}
	ins := []*instance{startServe(t, bin, args...), startServe(t, bin, args...), startServe(t, bin, args...)}
	owned := func(in *instance) int { ps, _ := priceRangeParts(in); return len(ps) }
	// The group balances the view's input and repartition partitions together, so an
	// instance may own none of price-range's served partitions: the two that stop are two
	// that own some.
	waitServe(t, ins[0], 2*time.Minute, "price-range's partitions to spread over at least two instances", func() bool {
		sum, owners := 0, 0
		for _, in := range ins {
			if n := owned(in); n > 0 {
				sum, owners = sum+n, owners+1
			}
		}
		return sum == 3 && owners >= 2
	})
	slices.SortFunc(ins, func(a, b *instance) int { return owned(a) - owned(b) })
	stays, leaves, killed := ins[0], ins[1], ins[2]
	t.Logf("price-range's partitions: %d on the instance that stays, %d on the one stopped, %d on the one killed", owned(stays), owned(leaves), owned(killed))
	for _, sym := range symbols {
		waitServe(t, stays, time.Minute, "price-range "+sym, func() bool {
			code, _ := get(stays.base + "/v1/views/price-range/keys/" + sym)
			return code == http.StatusOK
		})
	}

	// A client follows every change of the view through the instance to be stopped, and
	// resumes through the one that stays when that stream ends.
	follower := newChangeFollower(t, "price-range", leaves.base)
	followCtx, stopFollowing := context.WithCancel(ctx)
	defer stopFollowing()
	go follower.run(followCtx)
	waitServe(t, leaves, 30*time.Second, "the change stream to start", func() bool {
		follower.mu.Lock()
		defer follower.mu.Unlock()
		return follower.lastID != ""
	})
	follower.use(stays.base)

	// About 2000 trades a second; a reader loops over every key through the instance that
	// stays, noting when each failed read happened.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := len(symbols); loadCtx.Err() == nil; <-tick.C {
			for range 20 {
				cl.Produce(loadCtx, trade(i), func(_ *kgo.Record, err error) {
					if err == nil {
						produced.Add(1)
					}
				})
				i++
			}
		}
	})
	var (
		mu       sync.Mutex
		reads    int
		failures []failure
		slowest  time.Duration
	)
	failedSince := func(since time.Time) (out []failure) {
		mu.Lock()
		defer mu.Unlock()
		for _, f := range failures {
			if !f.at.Before(since) {
				out = append(out, f)
			}
		}
		return out
	}
	wg.Go(func() {
		for i := 0; loadCtx.Err() == nil; i++ {
			sym := symbols[i%len(symbols)]
			began := time.Now()
			code, body := get(stays.base + "/v1/views/price-range/keys/" + sym)
			took := time.Since(began)
			mu.Lock()
			reads++
			slowest = max(slowest, took)
			if code != http.StatusOK && loadCtx.Err() == nil {
				failures = append(failures, failure{began, sym, fmt.Sprintf("%d after %s %s", code, took.Round(time.Millisecond), strings.TrimSpace(body))})
			}
			mu.Unlock()
		}
	})

	// SIGTERM. A live watch of one of the stopping instance's keys must end with an end event
	// that says why and where to resume, not just close.
	var watchedKey string
	for _, sym := range symbols {
		if ownsKey(leaves, sym) {
			watchedKey = sym
			break
		}
	}
	endEvent := make(chan string, 1)
	go func() {
		endEvent <- lastEvent(loadCtx, leaves.base+"/v1/views/price-range/keys/"+watchedKey+"?watch=sse")
	}()
	time.Sleep(2 * time.Second)
	leaves.cmd.Process.Signal(syscall.SIGTERM)
	stopped := time.Now()
	select {
	case err := <-leaves.exited:
		if err != nil {
			t.Errorf("the stopped instance exited with %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the stopped instance did not exit within 60s of SIGTERM")
	}
	exitTook := time.Since(stopped)
	waitServe(t, stays, time.Minute, "the two remaining instances to own every partition", func() bool {
		return owned(stays)+owned(killed) == 3
	})
	tookOver := time.Since(stopped)
	time.Sleep(2 * time.Second)
	select {
	case ev := <-endEvent:
		if !strings.Contains(ev, "event: end") || !strings.Contains(ev, `"reason":"instance-stopping"`) {
			t.Errorf("the watch of %s on the stopped instance ended with %q, want an end event with reason instance-stopping", watchedKey, ev)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the watch of %s on the stopped instance did not end", watchedKey)
	}
	if f := failedSince(stopped); len(f) > 0 {
		t.Errorf("%d reads failed during the graceful handover, the first %s after SIGTERM%s", len(f), f[0].at.Sub(stopped).Round(time.Millisecond), firstFailure(f))
	}
	t.Logf("SIGTERM: the instance exited after %s; the others owned every partition %s after the signal",
		exitTook.Round(10*time.Millisecond), tookOver.Round(10*time.Millisecond))

	// SIGKILL, and start it again at once on the same data folder.
	var killedKeys []string
	for _, sym := range symbols {
		if ownsKey(killed, sym) {
			killedKeys = append(killedKeys, sym)
		}
	}
	if len(killedKeys) == 0 {
		t.Fatal("the instance to kill owns none of the symbols")
	}
	killed.cmd.Process.Signal(syscall.SIGKILL)
	<-killed.exited
	killedAt := time.Now()
	// On the same address, as a restarted process is (a static member's address reaches the
	// others only when the group next rebalances).
	restarted := startServeAt(t, bin, strings.TrimPrefix(killed.base, "http://"), killed.dataDir, args...)
	var lastAnswer string
	servedAgain := func() bool {
		for _, sym := range killedKeys {
			if code, body := get(stays.base + "/v1/views/price-range/keys/" + sym); code != http.StatusOK {
				lastAnswer = fmt.Sprintf("%s: %d %s", sym, code, body)
				return false
			}
		}
		return true
	}
	t.Cleanup(func() {
		if t.Failed() {
			_, views := get(restarted.base + "/v1/views")
			t.Logf("the last failed read: %s\nthe restarted instance's /v1/views: %s", lastAnswer, views)
		}
	})
	waitServe(t, restarted, time.Minute, "the killed instance's keys to be served again", servedAgain)
	backIn := time.Since(killedAt)
	waitReady(t, restarted, time.Minute, "the restarted instance's /readyz")
	readyIn := time.Since(killedAt)
	time.Sleep(time.Second)
	stopLoad()
	wg.Wait()
	afterKill := failedSince(killedAt)
	t.Logf("SIGKILL and restart: its keys served again through another instance %s after the kill, the restarted instance ready %s after it; %d reads failed meanwhile%s",
		backIn.Round(10*time.Millisecond), readyIn.Round(10*time.Millisecond), len(afterKill), firstFailure(afterKill))
	mu.Lock()
	t.Logf("%d reads in all, slowest %s; %d trades", reads, slowest.Round(time.Millisecond), produced.Load())
	mu.Unlock()

	// Nothing lost: every trade is counted (at least once) once the instances caught up.
	waitServe(t, stays, 2*time.Minute, "every trade to be counted", func() bool {
		total := 0
		for _, sym := range symbols {
			n, ok := tradeCount(stays, sym)
			if !ok {
				return false
			}
			total += n
		}
		return total >= int(produced.Load())
	})

	// Every change reached the follower once, in order, across the two moves.
	changelog := topic.Changelog(app, "price-range", 1, "range")
	ends := changelogEnds(ctx, t, brokers, changelog)
	waitServe(t, stays, time.Minute, "the change stream to reach the changelog's end", func() bool { return follower.reached(ends) })
	stopFollowing()
	follower.check(ctx, brokers, changelog, ends)
	// The stream through the stopped instance ends with an end event: instance-stopping, or
	// peer-ended when a partition it followed on another instance moved first.
	if len(follower.ends) == 0 || follower.ends[0] != "end:instance-stopping" && follower.ends[0] != "end:peer-ended" {
		t.Errorf("the change stream through the stopped instance did not end with an end event saying why: %v", follower.ends)
	}
}

// failure is a read that did not answer 200.
type failure struct {
	at  time.Time
	key string
	msg string
}

func firstFailure(fs []failure) string {
	if len(fs) == 0 {
		return ""
	}
	return fmt.Sprintf(", the first: %s %s", fs[0].key, fs[0].msg)
}

// ownsKey reports whether in serves key itself (its read was not forwarded).
func ownsKey(in *instance, key string) bool {
	owned, partitions := priceRangeParts(in)
	return partitions > 0 && slices.Contains(owned, partition.For([]byte(key), partitions))
}

// lastEvent reads a server-sent event stream until it ends and returns its last event.
func lastEvent(ctx context.Context, url string) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var last, cur strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "" {
			last.Reset()
			last.WriteString(cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(sc.Text() + "\n")
	}
	return last.String()
}
