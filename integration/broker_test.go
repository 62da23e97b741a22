package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/testenv"
)

// TestServeSurvivesBrokerRestart stops the Kafka broker under `tarn serve` for a while and
// starts it again, under both guarantees: tarn must not exit, must say that Kafka is gone,
// and must go on processing by itself once it is back, exactly under exactly-once.
func TestServeSurvivesBrokerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	broker, err := testenv.StartKafka(ctx, t.TempDir()) // this test's own: it is stopped
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { broker.Stop() })
	pg := testenv.Postgres(t)
	bin := buildTarn(t)
	migrate(ctx, t, pg)
	for _, eos := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly-once=%t", eos), func(t *testing.T) { brokerRestart(ctx, t, broker, bin, pg, eos) })
	}
}

func brokerRestart(ctx context.Context, t *testing.T, broker *testenv.KafkaProcess, bin, pg string, exactlyOnce bool) {
	app := fmt.Sprintf("br%d", time.Now().UnixNano()%1e9)
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Brokers...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	createEventTopics(ctx, t, broker.Brokers)
	sym := "B" + app
	produced := 0
	produce := func(n int) {
		for range n {
			produced++
			v, _ := json.Marshal(map[string]any{"id": fmt.Sprint(produced), "symbol": sym, "price": 100, "qty": 1, "time": time.Now().UTC()})
			pctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := cl.ProduceSync(pctx, &kgo.Record{Topic: "trades", Key: []byte(sym), Value: v}).FirstErr()
			cancel()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func(in *instance) int {
		if n, ok := tradeCount(in, sym); ok {
			return n
		}
		return -1
	}
	in := startServe(t, bin, "--app", app, "--kafka", strings.Join(broker.Brokers, ","), "--postgres", pg,
		fmt.Sprintf("--exactly-once=%t", exactlyOnce))
	produce(100)
	waitServe(t, in, 2*time.Minute, "the first count", func() bool { return count(in) == produced })

	broker.Kill()
	restarted := false
	defer func() {
		if !restarted { // for the next subtest
			broker.Restart(ctx)
		}
	}()
	time.Sleep(30 * time.Second) // the outage the issue names
	select {
	case err := <-in.exited:
		t.Fatalf("tarn serve exited (%v) while Kafka was down", err)
	default:
	}
	var views struct {
		Views []struct{ Name, State, Problem string }
	}
	decode(t, in.base+"/v1/views", &views)
	t.Logf("/v1/views while Kafka is down: %+v", views.Views)
	if code, body := get(in.base + "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz answers %d while Kafka is down: %s", code, body)
	}
	restarted = true
	if err := broker.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	produce(100)
	waitServe(t, in, 3*time.Minute, "the count to go on after the broker came back", func() bool {
		n := count(in)
		if exactlyOnce && n > produced {
			t.Fatalf("count %d > %d produced under exactly-once", n, produced)
		}
		return n >= produced
	})
	t.Logf("exactly-once=%t: processing went on %s after the broker was back", exactlyOnce, time.Since(began).Round(100*time.Millisecond))
	if exactlyOnce {
		time.Sleep(2 * time.Second)
		if n := count(in); n != produced {
			t.Fatalf("count %d after the outage, want exactly %d", n, produced)
		}
	}
	// The CDC source too: an order written now is read back with min_lsn.
	conn, err := pgx.Connect(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	customer := rand.Int64N(1e12) + 3e12
	if _, err := conn.Exec(ctx, `INSERT INTO customers (id, name, region) VALUES ($1, 'b', 'eu')`, customer); err != nil {
		t.Fatal(err)
	}
	lsn := insertOrder(ctx, t, conn, customer*10, customer)
	// The source may be in its backoff (up to 30s) when the broker returns, and the view may
	// still be starting (a read then answers 503 moving at once): read again for up to 90s.
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, n, body := ordersAt(in, customer, lsn, "30s")
		if code == http.StatusOK && n == 1 {
			break
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			diagnose(ctx, t, broker.Brokers, app, in)
			t.Fatalf("an order written after the outage, read with min_lsn %s: %d, %d orders: %s", lsn, code, n, body)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("exactly-once=%t: the CDC source wrote an order and the view served it %s after the broker was back", exactlyOnce, time.Since(began).Round(100*time.Millisecond))
}

// diagnose logs, for a failed read-back, where the CDC order got to: the app's topics'
// ends, the view's committed offsets, the CDC position records and the log lines about them.
func diagnose(ctx context.Context, t *testing.T, brokers []string, app string, in *instance) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	tps, _ := adm.ListTopics(ctx)
	var names []string
	for _, d := range tps.Sorted() {
		if strings.HasPrefix(d.Topic, app+".") && (strings.Contains(d.Topic, "orders") || strings.Contains(d.Topic, "position")) {
			names = append(names, d.Topic)
		}
	}
	ends, _ := adm.ListEndOffsets(ctx, names...)
	stable, _ := adm.ListCommittedOffsets(ctx, names...)
	ends.Each(func(o kadm.ListedOffset) {
		l, _ := stable.Lookup(o.Topic, o.Partition)
		t.Logf("diagnose: %s/%d end %d, last stable %d", o.Topic, o.Partition, o.Offset, l.Offset)
	})
	offs, _ := adm.FetchOffsets(ctx, app+".orders-per-customer.v1")
	offs.Each(func(o kadm.OffsetResponse) { t.Logf("diagnose: committed %s/%d %d", o.Topic, o.Partition, o.At) })
	_, views := get(in.base + "/v1/views")
	t.Logf("diagnose: /v1/views %s", views)
	pc, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeRegex(), kgo.ConsumeTopics("^"+app+`\.cdc-position\.`),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		for pctx.Err() == nil {
			pc.PollFetches(pctx).EachRecord(func(r *kgo.Record) { t.Logf("diagnose: position record %d %s", r.Offset, r.Value) })
		}
		cancel()
		pc.Close()
	}
	var lines []string
	for _, l := range strings.Split(in.stderr.String(), "\n") {
		if strings.Contains(l, "cdc") || strings.Contains(l, "orders-per-customer") && !strings.Contains(l, "restored") {
			lines = append(lines, l)
		}
	}
	t.Logf("diagnose: log lines of the CDC source and the view:\n%s", strings.Join(lines[max(0, len(lines)-60):], "\n"))
	// Where it is stuck: Go dumps every goroutine on SIGQUIT.
	in.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-in.exited:
	case <-time.After(10 * time.Second):
	}
	dump := in.stderr.String()
	if i := strings.Index(dump, "\ngoroutine "); i >= 0 {
		for _, g := range strings.Split(dump[i:], "\n\n") {
			if strings.Contains(g, "tarn/views.") || strings.Contains(g, "tarn.") {
				t.Logf("diagnose: %s", g)
			}
		}
	}
}

// TestServeWaitsForBroker starts `tarn serve` while its Kafka broker is down: it must neither
// exit nor say it is ready, must say why, and must start serving by itself once the broker is
// started.
func TestServeWaitsForBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	broker, err := testenv.StartKafka(ctx, t.TempDir()) // this test's own: it is stopped
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { broker.Stop() })
	pg := testenv.Postgres(t)
	bin := buildTarn(t)
	migrate(ctx, t, pg)
	broker.Kill()
	app := fmt.Sprintf("bw%d", time.Now().UnixNano()%1e9)
	in := startServe(t, bin, "--app", app, "--kafka", strings.Join(broker.Brokers, ","), "--postgres", pg)
	time.Sleep(15 * time.Second)
	select {
	case err := <-in.exited:
		t.Fatalf("tarn serve exited (%v) while Kafka was down at its start:\n%s", err, tailLines(in.stderr.String(), 20))
	default:
	}
	code, body := get(in.base + "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "dial") {
		t.Errorf("/readyz with Kafka down answers %d, want 503 naming the connection failure: %s", code, body)
	}
	t.Logf("/readyz with Kafka down since the start: %d %s", code, strings.TrimSpace(body))
	if !strings.Contains(in.stderr.String(), "connection refused") {
		t.Errorf("the log does not say Kafka cannot be reached:\n%s", tailLines(in.stderr.String(), 20))
	}

	if err := broker.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	createEventTopics(ctx, t, broker.Brokers)
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sym := "W" + app
	v, _ := json.Marshal(map[string]any{"id": "1", "symbol": sym, "price": 100, "qty": 1, "time": time.Now().UTC()})
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "trades", Key: []byte(sym), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitReady(t, in, 2*time.Minute, "/readyz once Kafka is up")
	waitServe(t, in, time.Minute, "the trade to be counted", func() bool { n, ok := tradeCount(in, sym); return ok && n == 1 })
	t.Logf("serving %s after the broker started", time.Since(began).Round(100*time.Millisecond))
}
