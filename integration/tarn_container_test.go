package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/migrations"
	"github.com/tarnhq/tarn/tarntest"
)

// EnvTarnImage names the tarn image to test (scripts/test-containers.sh builds it with
// scripts/tarn-image.sh); without it the test runs that script itself.
const EnvTarnImage = "TARN_TEST_TARN_IMAGE"

// TestContainerTarn runs tarn's image in a container with tarntest.Run, against the real Kafka
// and Postgres of the harness (containers too when an engine answers, as in
// scripts/test-containers.sh): rows inserted in Postgres reach orders-per-customer through CDC
// and are read over HTTP, and the container is gone after Terminate. The container shares the
// host's network, since the broker advertises 127.0.0.1.
func TestContainerTarn(t *testing.T) {
	requireEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	image := tarnImage(t)
	brokers := testenv.Kafka(t)
	pg := testenv.Postgres(t)
	migrate(ctx, t, pg)
	createEventTopics(ctx, t, brokers)

	app := fmt.Sprintf("box%d", time.Now().UnixNano()%1e9)
	logs := &lockedBuffer{}
	start := time.Now()
	tc, err := tarntest.Run(ctx, image, tarntest.WithHostNetwork(), tarntest.WithLogs(logs),
		tarntest.WithCmd("serve", "--app", app, "--kafka", strings.Join(brokers, ","), "--postgres", pg,
			"--http", freeAddr(t), "--memory", "256MiB"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tarn container %.12s ready at %s after %s", tc.GetContainerID(), tc.URL, time.Since(start).Round(time.Millisecond))
	id := tc.GetContainerID()
	terminated := false
	defer func() {
		if !terminated {
			tc.Terminate(context.WithoutCancel(ctx))
		}
		if t.Failed() {
			t.Logf("tarn container output (tail):\n%s", tailLines(logs.String(), 40))
		}
	}()

	vs, err := tc.Client.Views(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !hasView(vs, "orders-per-customer") {
		t.Fatalf("GET /v1/views lists %v, want orders-per-customer among them", vs)
	}

	conn, err := pgx.Connect(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		"INSERT INTO customers (id, name, region) VALUES (7, 'seven', 'emea')",
		"INSERT INTO orders (id, customer_id, amount) VALUES (1, 7, 10.50), (2, 7, 4.25)",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	inserted := time.Now()
	var stats struct {
		Orders int64   `json:"orders"`
		Total  float64 `json:"total"`
	}
	for stats.Orders != 2 || stats.Total != 14.75 {
		err := tc.Client.Get(ctx, "orders-per-customer", "7", &stats)
		var p *tarntest.Problem
		if err != nil && !errors.Is(err, tarntest.ErrNoKey) && !(errors.As(err, &p) && p.Status == 503) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("orders-per-customer/7 is %+v (last error %v), want 2 orders totalling 14.75", stats, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
	t.Logf("orders-per-customer/7 = %+v, %s after the insert", stats, time.Since(inserted).Round(time.Millisecond))

	if err := tc.Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	terminated = true
	// The engine's answer is read as text: its typed not-found error would take a direct
	// dependency on containerd/errdefs for this one line.
	if _, err := tc.State(ctx); err == nil || !strings.Contains(err.Error(), "No such container") {
		t.Fatalf("container %.12s after Terminate: inspect says %v, want not found", id, err)
	}
}

// requireEngine skips the test, saying why, when no Docker engine answers, or fails it when
// the run is meant to exercise containers (testenv.EnvRequireContainers).
func requireEngine(t *testing.T) {
	t.Helper()
	if os.Getenv(testenv.EnvNoContainers) != "" {
		t.Skipf("%v: %s is set", testenv.ErrNoEngine, testenv.EnvNoContainers)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// The engine look-up ignores contexts (it can wait ~55 s on a socket that never answers).
	answer := make(chan error, 1)
	go func() {
		p, err := testcontainers.ProviderDocker.GetProvider()
		if err == nil {
			defer p.Close()
			err = p.Health(ctx)
		}
		answer <- err
	}()
	var err error
	select {
	case err = <-answer:
	case <-ctx.Done():
		err = ctx.Err()
	}
	switch {
	case err == nil:
	case os.Getenv(testenv.EnvRequireContainers) != "":
		t.Fatalf("%v: %v (%s is set)", testenv.ErrNoEngine, err, testenv.EnvRequireContainers)
	default:
		t.Skipf("%v: %v", testenv.ErrNoEngine, err)
	}
}

// tarnImage is EnvTarnImage, or the image scripts/tarn-image.sh builds (or finds up to date).
func tarnImage(t *testing.T) string {
	t.Helper()
	if img := os.Getenv(EnvTarnImage); img != "" {
		return img
	}
	out, err := exec.Command("../scripts/tarn-image.sh").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("scripts/tarn-image.sh: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	_, img, ok := strings.Cut(strings.TrimSpace(string(out)), EnvTarnImage+"=")
	if !ok {
		t.Fatalf("scripts/tarn-image.sh printed %q, want an assignment of %s", out, EnvTarnImage)
	}
	return img
}

func migrate(ctx context.Context, t *testing.T, pg string) {
	t.Helper()
	db, err := migrations.Open(pg)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := migrations.Up(ctx, db); err != nil {
		t.Fatalf("migrations: %v", err)
	}
	// cmd/tarn's CDC views read the demo's tables; a user's service reads its own.
	if _, err := migrations.UpDemo(ctx, db); err != nil {
		t.Fatalf("demo migrations: %v", err)
	}
}

// requireNoDemoTables fails the test when the database holds any of the demo's tables: `tarn
// migrate` installs only tarn's own objects.
func requireNoDemoTables(ctx context.Context, t *testing.T, pg string) {
	t.Helper()
	db, err := migrations.Open(pg)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname || '.' || tablename = ANY($1)`,
		migrations.DemoTables).Scan(&n)
	if err != nil || n != 0 {
		t.Fatalf("tarn migrate left %d of the demo's tables (%v); it must install only tarn's own objects", n, err)
	}
}

// exampleTopics are the event topics cmd/tarn's views read (its examples.go); `tarn serve`
// refuses to start while one is missing, naming it.
var exampleTopics = []string{"trades", "clicks", "impressions", "ad-clicks"}

// createEventTopics creates exampleTopics; tests share them, so ones that exist are fine.
func createEventTopics(ctx context.Context, t *testing.T, brokers []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).CreateTopics(ctx, 3, 1, nil, exampleTopics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			t.Fatalf("create topic %s: %v", r.Topic, r.Err)
		}
	}
}

func hasView(vs []tarntest.ViewInfo, name string) bool {
	for _, v := range vs {
		if v.Name == name {
			return true
		}
	}
	return false
}

// lockedBuffer collects the container's output, written by testcontainers' log goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
