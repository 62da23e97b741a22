package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/serve/client"
)

// TestServeReadYourWrites writes to Postgres and at once reads the CDC-fed view with
// min_lsn=<pg_current_wal_insert_lsn() after the commit: at or after
// the commit's end whatever synchronous_commit is (with it off, pg_current_wal_lsn() can
// trail the commit)>, through `tarn serve`, under both
// guarantees: every read must see its write (the view aggregates orders per customer, through
// a repartition step, so the wait covers both sub-topologies), and its position's LSN must be
// at or past the write's. Afterwards a read without min_lsn must come to carry an LSN at or
// past the last write too (the instance follows the view's applied LSN by itself).
func TestServeReadYourWrites(t *testing.T) {
	for _, eos := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly-once=%t", eos), func(t *testing.T) { readYourWrites(t, eos) })
	}
}

func readYourWrites(t *testing.T, exactlyOnce bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	brokers := testenv.Kafka(t)
	pg := testenv.Postgres(t)
	bin := buildTarn(t)
	app := fmt.Sprintf("ryw%d", time.Now().UnixNano()%1e9)
	migrate(ctx, t, pg)
	createEventTopics(ctx, t, brokers)
	conn, err := pgx.Connect(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Customers of this run only, so that other tests' orders do not count.
	base := rand.Int64N(1e12) + 1e12
	const customers = 7
	for c := range int64(customers) {
		if _, err := conn.Exec(ctx, `INSERT INTO customers (id, name, region) VALUES ($1, 'c', 'eu')`, base+c); err != nil {
			t.Fatal(err)
		}
	}
	in := startServe(t, bin, "--app", app, "--kafka", strings.Join(brokers, ","), "--postgres", pg,
		fmt.Sprintf("--exactly-once=%t", exactlyOnce), "--log-level", "debug")
	waitReady(t, in, 2*time.Minute, "readyz")

	const iterations = 1000 // the count, under each guarantee
	want := map[int64]int{}
	var waits []time.Duration
	for i := range iterations {
		c := base + int64(i%customers)
		lsn := insertOrder(ctx, t, conn, base*10+int64(i), c)
		want[c]++
		began := time.Now()
		code, n, body := ordersAt(in, c, lsn, "20s")
		waits = append(waits, time.Since(began))
		if code == http.StatusOK && n == want[c] {
			if got := answerLSN(t, body); got < mustLSN(t, lsn) {
				t.Fatalf("write %d (lsn %s): the answer's position has LSN %s, below the write's: %s", i, lsn, got, body)
			}
		}
		if code != http.StatusOK || n != want[c] {
			for _, l := range strings.Split(in.stderr.String(), "\n") {
				if strings.Contains(l, "a wait for applied") {
					t.Log(l)
				}
			}
			rc, _ := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(app+".cdc-position.tarn_"+app), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			pctx, pc := context.WithTimeout(ctx, 3*time.Second)
			for _, r := range rc.PollFetches(pctx).Records() {
				t.Logf("position record %s = %s", r.Key, r.Value)
			}
			pc()
			rc.Close()
			t.Fatalf("write %d (customer %d, lsn %s): read answered %d with %d orders, want %d: %s",
				i, c, lsn, code, n, want[c], strings.TrimSpace(body))
		}
	}
	// The last write, read without min_lsn: its LSN comes from the instance's own follower.
	var last client.LSN
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()`).Scan(&last); err != nil {
		t.Fatal(err) // a pg_lsn scans into the client's LSN
	}
	c := base + int64((iterations-1)%customers)
	var seen client.LSN
	waitServe(t, in, 30*time.Second, "an answer whose LSN covers the last write", func() bool {
		code, body := get(fmt.Sprintf("%s/v1/views/orders-per-customer/keys/%d", in.base, c))
		if code == http.StatusOK {
			seen = answerLSN(t, body)
		}
		return seen >= last
	})
	t.Logf("a read without min_lsn carries LSN %s, at or past the last write's %s", seen, last)

	// A view fed from Kafka alone has no LSN to wait for: min_lsn there is the client's mistake.
	code, body := get(fmt.Sprintf("%s/v1/views/price-range/keys/ACME?min_lsn=%s", in.base, last))
	if code != http.StatusBadRequest || !strings.Contains(body, `"param":"min_lsn"`) {
		t.Errorf("min_lsn on a Kafka-fed view answered %d, want 400 naming min_lsn: %s", code, body)
	}

	slices.Sort(waits)
	t.Logf("exactly-once=%t: %d writes, each read with min_lsn saw its write; read wait p50 %s, p99 %s, max %s",
		exactlyOnce, iterations, waits[len(waits)/2].Round(time.Millisecond),
		waits[len(waits)*99/100].Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond))
}

// answerLSN is the LSN of the position in an answer's body, 0 when it has none.
func answerLSN(t *testing.T, body string) client.LSN {
	t.Helper()
	var got struct{ Position client.Position }
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	return got.Position.LSN
}

func mustLSN(t *testing.T, s string) client.LSN {
	t.Helper()
	l, err := client.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
