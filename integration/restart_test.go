package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/testenv"
)

// TestServeRestartsInSeconds SIGKILLs `tarn serve` and starts it again at once on the same data
// folder, restartCycles times, under both guarantees. The restarted process is the same static
// member of the views' groups (its instance id is kept in the data folder), so it takes its
// partitions back without waiting for its predecessor's session to expire: the session
// timeout is set to 40 s here, and every restart must serve again well within it. /readyz must
// never say 200 before the instance answers reads, and the count it serves stays exact.
func TestServeRestartsInSeconds(t *testing.T) {
	for _, eos := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly-once=%t", eos), func(t *testing.T) { testRestarts(t, eos) })
	}
}

// restartCycles is how many times each guarantee's instance is killed and started again.
const restartCycles = 20

func testRestarts(t *testing.T, exactlyOnce bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	brokers := testenv.Kafka(t)
	pg := testenv.Postgres(t)
	bin := buildTarn(t)
	app := fmt.Sprintf("rs%d", time.Now().UnixNano()%1e9)
	migrate(ctx, t, pg)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	createEventTopics(ctx, t, brokers)
	// Trades of one symbol (its own per app run), counted by price-range.
	sym := "R" + app
	produced := 0
	produce := func(n int) {
		for range n {
			produced++
			v, _ := json.Marshal(map[string]any{"id": fmt.Sprint(produced), "symbol": sym, "price": 100 + produced%7, "qty": 1, "time": time.Now().UTC()})
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "trades", Key: []byte(sym), Value: v}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func(in *instance) (int, bool) { return tradeCount(in, sym) }

	// An order per restart, read back with min_lsn: the CDC source must resume too.
	conn, err := pgx.Connect(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	customer := rand.Int64N(1e12) + 2e12
	if _, err := conn.Exec(ctx, `INSERT INTO customers (id, name, region) VALUES ($1, 'r', 'eu')`, customer); err != nil {
		t.Fatal(err)
	}
	orders := 0
	order := func(in *instance) time.Duration {
		orders++
		lsn := insertOrder(ctx, t, conn, customer*10+int64(orders), customer)
		began := time.Now()
		if code, n, body := ordersAt(in, customer, lsn, "30s"); code != http.StatusOK || n != orders {
			t.Fatalf("order %d read with min_lsn %s: %d, %d orders, want %d: %s", orders, lsn, code, n, orders, body)
		}
		return time.Since(began)
	}

	args := []string{"--app", app, "--kafka", strings.Join(brokers, ","), "--postgres", pg, "--session-timeout", "40s",
		fmt.Sprintf("--exactly-once=%t", exactlyOnce)}
	dataDir := t.TempDir()
	in := startServeIn(t, bin, dataDir, args...)
	produce(50)
	waitServe(t, in, 2*time.Minute, "the first count", func() bool { n, ok := count(in); return ok && n == produced })

	waitReady(t, in, time.Minute, "readyz")
	order(in)
	var took, cdcTook []time.Duration
	for cycle := range restartCycles {
		in.cmd.Process.Signal(syscall.SIGKILL)
		<-in.exited
		produce(20) // while it is down
		began := time.Now()
		in = startServeIn(t, bin, dataDir, args...)
		// Ready means serving: the first 200 from /readyz comes with every partition here
		// (one instance) and a read that answers.
		waitServe(t, in, 35*time.Second, fmt.Sprintf("restart %d to be ready", cycle), func() bool {
			code, _ := get(in.base + "/readyz")
			return code == http.StatusOK
		})
		if _, ok := count(in); !ok {
			code, body := get(in.base + "/v1/views/price-range/keys/" + sym)
			t.Fatalf("restart %d: /readyz is 200 but a read answers %d %s", cycle, code, body)
		}
		waitServe(t, in, 35*time.Second, fmt.Sprintf("restart %d to count every trade", cycle), func() bool {
			n, ok := count(in)
			if ok && exactlyOnce && n > produced {
				t.Fatalf("restart %d: count %d > %d produced under exactly-once", cycle, n, produced)
			}
			return ok && n >= produced
		})
		took = append(took, time.Since(began))
		cdcTook = append(cdcTook, order(in))
	}
	slices.Sort(took)
	slices.Sort(cdcTook)
	t.Logf("exactly-once=%t: an order written after each restart read back with min_lsn within p50 %s, max %s of the instance serving again",
		exactlyOnce, cdcTook[len(cdcTook)/2].Round(10*time.Millisecond), cdcTook[len(cdcTook)-1].Round(10*time.Millisecond))
	t.Logf("exactly-once=%t: serving again after SIGKILL and restart: p50 %s, max %s over %d restarts (session timeout 40s)",
		exactlyOnce, took[len(took)/2].Round(10*time.Millisecond), took[len(took)-1].Round(10*time.Millisecond), len(took))
	if n, _ := count(in); exactlyOnce && n != produced {
		t.Fatalf("count %d after the restarts, want exactly %d", n, produced)
	}
}
