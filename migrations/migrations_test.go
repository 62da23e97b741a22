package migrations

import (
	"context"
	"database/sql"
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
	if v != 1 {
		t.Fatalf("version after Up = %d, want 1", v)
	}
	if again, err := Up(ctx, db); err != nil || again != v {
		t.Fatalf("second Up = %d, %v; want %d, nil", again, err, v)
	}
	if tables, published := demoObjects(ctx, t, db); tables != 0 || published != 0 {
		t.Fatalf("Up made %d demo tables and %d published; the demo's schema is UpDemo's alone", tables, published)
	}

	dv, err := UpDemo(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if dv != 2 {
		t.Fatalf("demo version after UpDemo = %d, want 2", dv)
	}
	if v, err := Version(ctx, db); err != nil || v != 1 {
		t.Fatalf("tarn's version after UpDemo = %d, %v; want 1 (the demo keeps its own version table)", v, err)
	}
	if tables, published := demoObjects(ctx, t, db); tables != len(DemoTables) || published != len(DemoTables) {
		t.Fatalf("%d demo tables, %d published; want %d of each", tables, published, len(DemoTables))
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO customers (id, name, region) VALUES (1, 'Ada', 'eu');
		INSERT INTO orders (id, customer_id, amount) VALUES (1, 1, 12.50)`); err != nil {
		t.Fatalf("demo schema does not take an order: %v", err)
	}

	if err := DownDemo(ctx, db); err != nil {
		t.Fatal(err)
	}
	if tables, published := demoObjects(ctx, t, db); tables != 0 || published != 0 {
		t.Fatalf("%d demo tables, %d published after DownDemo; want 0", tables, published)
	}
	if err := DownTo(ctx, db, 0); err != nil {
		t.Fatal(err)
	}
	if v, err := Version(ctx, db); err != nil || v != 0 {
		t.Fatalf("version after DownTo(0) = %d, %v; want 0", v, err)
	}
}

// demoObjects counts the demo's tables and the tables of its publication.
func demoObjects(ctx context.Context, t *testing.T, db *sql.DB) (tables, published int) {
	t.Helper()
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname || '.' || tablename = ANY($1)`, DemoTables).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_publication_tables WHERE pubname = $1`, DemoPublication).Scan(&published); err != nil {
		t.Fatal(err)
	}
	return tables, published
}
