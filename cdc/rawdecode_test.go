package cdc

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestRawDecodeThroughput measures how fast the server alone decodes and sends one 1M-row
// transaction (no parsing, no Kafka): the ceiling for TestThroughput's streaming figures.
// Run it with TARN_CDC_BENCH=1.
func TestRawDecodeThroughput(t *testing.T) {
	if os.Getenv("TARN_CDC_BENCH") == "" {
		t.Skip("set TARN_CDC_BENCH=1 to measure throughput")
	}
	e := newEnv(t)
	c := e.conn(t)
	mustExec(t, c, `CREATE TABLE bench (id bigint PRIMARY KEY, name text, qty int, at timestamptz, price numeric(10,2), pad text)`)
	mustExec(t, c, `CREATE PUBLICATION p FOR TABLE bench`)
	ctx := context.Background()
	cfg, _ := pgconn.ParseConfig(e.pgURL)
	cfg.RuntimeParams["replication"] = "database"
	repl, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, "raw", "pgoutput", pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if err != nil {
		t.Fatal(err)
	}
	start, _ := pglogrepl.ParseLSN(res.ConsistentPoint)
	mustExec(t, c, `INSERT INTO bench SELECT g, 'name ' || g, g % 1000, now(), g / 100.0, repeat('p', 110) FROM generate_series(1, 1000000) g`)
	begin := time.Now()
	if err := pglogrepl.StartReplication(ctx, repl, "raw", start, pglogrepl.StartReplicationOptions{PluginArgs: []string{"proto_version '1'", "publication_names 'p'"}}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for n < 1000000 {
		msg, err := repl.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// XLogData: 'w', 24 header bytes, then the pgoutput message, 'I' for an insert.
		if cd, ok := msg.(*pgproto3.CopyData); ok && cd.Data[0] == 'w' && len(cd.Data) > 25 && cd.Data[25] == 'I' {
			n++
		}
	}
	d := time.Since(begin)
	t.Logf("raw pgoutput decode: %d inserts in %s = %.0f rows/s", n, d, float64(n)/d.Seconds())
}
