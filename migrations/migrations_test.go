package migrations

import (
	"context"
	"testing"

	"github.com/tarnhq/tarn/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestUpDown(t *testing.T) {
	ctx := context.Background()
	db, err := Open(testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, err := Up(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if v != 3 {
		t.Fatalf("version after Up = %d, want 3", v)
	}
	if again, err := Up(ctx, db); err != nil || again != v {
		t.Fatalf("second Up = %d, %v; want %d, nil", again, err, v)
	}
	var tables, published int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname || '.' || tablename = ANY($1)`, DemoTables).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_publication_tables WHERE pubname = $1`, DemoPublication).Scan(&published); err != nil {
		t.Fatal(err)
	}
	if tables != len(DemoTables) || published != len(DemoTables) {
		t.Fatalf("%d demo tables, %d published; want %d of each", tables, published, len(DemoTables))
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO customers (id, name, region) VALUES (1, 'Ada', 'eu');
		INSERT INTO orders (id, customer_id, amount) VALUES (1, 1, 12.50)`); err != nil {
		t.Fatalf("demo schema does not take an order: %v", err)
	}
	if err := DownTo(ctx, db, 0); err != nil {
		t.Fatal(err)
	}
	if v, err := Version(ctx, db); err != nil || v != 0 {
		t.Fatalf("version after DownTo(0) = %d, %v; want 0", v, err)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname || '.' || tablename = ANY($1)`, DemoTables).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("%d demo tables after DownTo(0) (%v); want 0", tables, err)
	}
}
