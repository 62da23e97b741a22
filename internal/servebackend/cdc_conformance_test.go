package servebackend_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/cdc"
	"github.com/tarnhq/tarn/internal/servebackend"
	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/internal/topic"
	"github.com/tarnhq/tarn/serve"
	"github.com/tarnhq/tarn/serve/servetest"
	"github.com/tarnhq/tarn/views"
)

// cdcHarness serves a Postgres table read through a real CDC source into the real Kafka:
// writes are Postgres transactions, so min_lsn and the LSNs of answers take the adapter's
// whole path (the source's position topic, the table topics' ends, the groups' offsets).
type cdcHarness struct {
	be      *servebackend.Backend
	pg      *pgx.Conn
	stopRun context.CancelFunc
}

// row is a row of public.rows as the view serves it: {"n": ...}, the suite's values.
type row struct {
	N int `json:"n"`
}

func newCDCHarness(t *testing.T) *cdcHarness {
	brokers := testenv.Kafka(t)
	pgURL := testenv.Postgres(t)
	app := newApp("servebackend-cdc")
	ctx := context.Background()
	pg, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close(context.Background()) })
	if _, err := pg.Exec(ctx, `CREATE TABLE rows (k text PRIMARY KEY, n int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	src, err := cdc.New(cdc.Config{PostgresURL: pgURL, App: app, Tables: []string{"public.rows"}, Partitions: 3,
		Brokers: brokers, Dir: filepath.Join(t.TempDir(), "cdc"), HeartbeatInterval: 200 * time.Millisecond,
		Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// The instance's CDC leader creates the position topic before the source runs.
	compact := "compact"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &compact}, topic.CDCPosition(app, src.Slot())); err != nil {
		t.Fatal(err)
	}
	srcCtx, stopSource := context.WithCancel(ctx)
	srcDone := make(chan error, 1)
	go func() { srcDone <- src.Run(srcCtx) }()
	t.Cleanup(func() {
		stopSource()
		if err := <-srcDone; err != nil {
			t.Errorf("cdc source: %v", err)
		}
	})
	// The views refuse to start before the source has made its table topic.
	table := topic.CDCTable(app, "public", "rows")
	for deadline := time.Now().Add(servetest.Timeout); ; {
		td, err := adm.ListTopics(ctx, table)
		if err == nil && td.Has(table) && td[table].Err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the CDC source did not create %s: %v", table, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	v, err := views.Define("conformance", func(b *views.Builder) {
		// The table's store holds whole rows; the suite's values are {"n": ...}.
		views.MapTable(views.CDCTable[row](b, "public", "rows"), "value", func(_ string, r row) row { return r }).Serve()
	})
	if err != nil {
		t.Fatal(err)
	}
	h := &cdcHarness{pg: pg}
	h.be, h.stopRun = start(t, app, brokers, v, servebackend.Config{Brokers: brokers, App: app,
		CDCSlot: src.Slot(), CDCTopics: []string{table}})
	return h
}

func (h *cdcHarness) Backend() serve.Backend { return h.be }
func (h *cdcHarness) View() string           { return "conformance" }
func (h *cdcHarness) Stop(testing.TB)        { h.stopRun() }

func (h *cdcHarness) Write(t testing.TB, key string, value json.RawMessage) {
	t.Helper()
	h.WriteLSN(t, key, value)
}

// WriteLSN returns pg_current_wal_insert_lsn() after the commit: at or past the commit's
// (pg_current_wal_lsn() can trail it).
func (h *cdcHarness) WriteLSN(t testing.TB, key string, value json.RawMessage) serve.LSN {
	t.Helper()
	ctx := context.Background()
	var err error
	if value == nil {
		_, err = h.pg.Exec(ctx, `DELETE FROM rows WHERE k = $1`, key)
	} else {
		var r row
		if err = json.Unmarshal(value, &r); err == nil {
			_, err = h.pg.Exec(ctx, `INSERT INTO rows (k, n) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET n = EXCLUDED.n`, key, r.N)
		}
	}
	if err != nil {
		t.Fatalf("write %s=%s: %v", key, value, err)
	}
	var text string
	if err := h.pg.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&text); err != nil {
		t.Fatal(err)
	}
	lsn, err := serve.ParseLSN(text)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

// TestCDCConformance holds the adapter to serve's contract on a view of a Postgres table,
// through the real CDC source, Kafka and Postgres, with the LSN case on.
func TestCDCConformance(t *testing.T) {
	servetest.Conformance(t, newCDCHarness(t))
}
