package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tarnhq/tarn/internal/localpg"
	"github.com/tarnhq/tarn/internal/testenv"
)

// failWithin is how soon `tarn serve` must exit on a CDC problem that needs an operator.
const failWithin = 10 * time.Second

// TestServeCDCPermanentFailures runs `tarn serve` against each CDC problem that no retry fixes
// and checks that it exits non-zero within failWithin, its stderr naming the problem and the
// fix. The shared server (a superuser, trusted) gets a database per case; a wrong password and
// wal_level=replica need a cluster of their own.
func TestServeCDCPermanentFailures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kafka := testenv.Kafka(t)
	createEventTopics(ctx, t, kafka)
	bin := buildTarn(t)
	run := func(t *testing.T, pg string, says ...string) {
		t.Helper()
		app := fmt.Sprintf("fail%d", time.Now().UnixNano()%1e9)
		in := startServe(t, bin, "--app", app, "--kafka", strings.Join(kafka, ","), "--postgres", pg)
		wantExit(t, in, failWithin, says...)
	}
	withTables := func(t *testing.T, ddl ...string) string {
		pg := testenv.Postgres(t)
		for _, stmt := range ddl {
			execSQL(ctx, t, pg, stmt)
		}
		return pg
	}
	keyed := []string{"CREATE TABLE customers (id int PRIMARY KEY)", "CREATE TABLE orders (id int PRIMARY KEY)",
		"CREATE TABLE users (id int PRIMARY KEY)"}

	t.Run("missing table", func(t *testing.T) {
		pg := withTables(t, keyed[:2]...)
		run(t, pg, "table public.users does not exist", "create it")
	})
	t.Run("no primary key", func(t *testing.T) {
		pg := withTables(t, append(keyed[:2:2], "CREATE TABLE users (id int)")...)
		run(t, pg, "table public.users has no primary key", "ADD PRIMARY KEY", "REPLICA IDENTITY FULL")
	})
	t.Run("role without REPLICATION", func(t *testing.T) {
		pg := withTables(t, keyed...)
		role := "norepl_" + fmt.Sprint(time.Now().UnixNano()%1e9)
		execSQL(ctx, t, pg, "CREATE ROLE "+role+" LOGIN")
		execSQL(ctx, t, pg, "GRANT SELECT ON ALL TABLES IN SCHEMA public TO "+role)
		run(t, asRole(t, pg, role, ""), fmt.Sprintf(`role %q lacks REPLICATION`, role), fmt.Sprintf(`ALTER ROLE %q REPLICATION`, role))
	})
	t.Run("role without SELECT", func(t *testing.T) {
		pg := withTables(t, keyed...)
		role := "nosel_" + fmt.Sprint(time.Now().UnixNano()%1e9)
		execSQL(ctx, t, pg, "CREATE ROLE "+role+" LOGIN REPLICATION")
		run(t, asRole(t, pg, role, ""), fmt.Sprintf(`role %q cannot read table public.customers`, role), "GRANT SELECT ON")
	})

	const password = "s3cret"
	c, err := localpg.StartWith(ctx, t.TempDir(), localpg.Options{Password: password,
		Settings: []localpg.Setting{{Name: "wal_level", Value: "replica"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	t.Run("wrong password", func(t *testing.T) {
		run(t, asRole(t, c.URL, "postgres", "wrong"), `Postgres refused role "postgres"`, "check the user and password", "SQLSTATE 28P01")
	})
	t.Run("wal_level replica", func(t *testing.T) {
		for _, stmt := range keyed {
			execSQL(ctx, t, c.URL, stmt)
		}
		run(t, c.URL, `wal_level is "replica", not logical`, "ALTER SYSTEM SET wal_level = logical", "restart Postgres")
	})
}

// TestServeCDCRecovers starts `tarn serve` while Postgres is down: it stays up, says why it is
// not ready (readiness, views, status, metrics), and recovers by itself once Postgres starts,
// and again after a restart of Postgres under the streaming source; its stop then logs a
// shutdown, not a handover.
func TestServeCDCRecovers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kafka := testenv.Kafka(t)
	createEventTopics(ctx, t, kafka)
	bin := buildTarn(t)
	c, err := localpg.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	migrate(ctx, t, c.URL)
	if err := c.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	app := fmt.Sprintf("recover%d", time.Now().UnixNano()%1e9)
	in := startServe(t, bin, "--app", app, "--kafka", strings.Join(kafka, ","), "--postgres", c.URL)

	var ready string
	waitServe(t, in, time.Minute, "/readyz to say the CDC source retries", func() bool {
		code, body := get(in.base + "/readyz")
		ready = body
		return code == http.StatusServiceUnavailable && strings.Contains(body, "retrying in") && strings.Contains(body, "connect to Postgres")
	})
	t.Logf("/readyz while Postgres is down: %s", ready)
	_, views := get(in.base + "/v1/views")
	if !strings.Contains(views, `"state":"failing"`) || !strings.Contains(views, "connect to Postgres") {
		t.Errorf("/v1/views while Postgres is down shows no failing view with the reason:\n%s", views)
	}
	out, _ := exec.Command(bin, "status", "--http", strings.TrimPrefix(in.base, "http://")).CombinedOutput()
	if !strings.Contains(string(out), "failing") || !strings.Contains(string(out), "connect to Postgres") {
		t.Errorf("tarn status while Postgres is down:\n%s", out)
	}
	_, metrics := get(in.base + "/metrics")
	if !hasMetric(metrics, "tarn_cdc_source_up", "0") || hasMetric(metrics, `tarn_cdc_errors_total{kind="transient"`, "0") {
		t.Errorf("metrics while Postgres is down: want tarn_cdc_source_up 0 and transient errors counted:\n%s", grepLines(metrics, "tarn_cdc_"))
	}

	if err := c.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	waitReady(t, in, 2*time.Minute, "/readyz 200 after Postgres started")
	_, metrics = get(in.base + "/metrics")
	if !hasMetric(metrics, "tarn_cdc_source_up", "1") {
		t.Errorf("metrics after recovery: want tarn_cdc_source_up 1:\n%s", grepLines(metrics, "tarn_cdc_"))
	}

	// A restart of Postgres under a streaming source is ridden out the same way.
	if err := c.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	waitServe(t, in, time.Minute, "/readyz 503 while Postgres restarts", func() bool {
		code, body := get(in.base + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "retrying in")
	})
	if err := c.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	waitReady(t, in, 2*time.Minute, "/readyz 200 after Postgres restarted")

	in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-in.exited:
		if err != nil {
			t.Errorf("tarn serve exited with %v after SIGTERM", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("tarn serve did not stop within 60s of SIGTERM")
	}
	stderr := in.stderr.String()
	if !strings.Contains(stderr, "cdc: stopped the CDC source") || strings.Contains(stderr, "handed the CDC source over") {
		t.Errorf("a shutdown with no other instance must log the stop, not a handover:\n%s", grepLines(stderr, "cdc:"))
	}
	if !strings.Contains(stderr, "attempt=1") || !strings.Contains(stderr, "retry_in=") {
		t.Errorf("the retries are not logged with attempt and delay:\n%s", grepLines(stderr, "retrying"))
	}
}

// TestServeCDCPublicationDropped: a publication dropped under a streaming source stops `tarn
// serve` within failWithin of the next change, naming the publication and the fix.
func TestServeCDCPublicationDropped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kafka := testenv.Kafka(t)
	createEventTopics(ctx, t, kafka)
	bin := buildTarn(t)
	pg := testenv.Postgres(t)
	migrate(ctx, t, pg)
	app := fmt.Sprintf("droppub%d", time.Now().UnixNano()%1e9)
	in := startServe(t, bin, "--app", app, "--kafka", strings.Join(kafka, ","), "--postgres", pg)
	waitReady(t, in, 2*time.Minute, "readyz")
	pub := "tarn_" + app // the source's default publication
	execSQL(ctx, t, pg, "DROP PUBLICATION "+pub)
	execSQL(ctx, t, pg, "INSERT INTO customers (id, name, region) VALUES (1, 'a', 'eu')")
	wantExit(t, in, failWithin, fmt.Sprintf("publication %q", pub), "does not exist", "CREATE PUBLICATION "+pub+" FOR TABLE")
}

// wantExit waits for in to exit non-zero within limit of now and checks that its stderr says
// each of says.
func wantExit(t *testing.T, in *instance, limit time.Duration, says ...string) {
	t.Helper()
	began := time.Now()
	select {
	case err := <-in.exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Errorf("tarn serve exited with %v, want a non-zero exit code", err)
		}
	case <-time.After(limit):
		t.Fatalf("tarn serve still runs %s after start; stderr:\n%s", limit, tailLines(in.stderr.String(), 20))
	}
	stderr := in.stderr.String()
	for _, s := range says {
		if !strings.Contains(stderr, s) {
			t.Errorf("stderr does not say %q:\n%s", s, tailLines(stderr, 10))
		}
	}
	t.Logf("exited after %s; last stderr line: %s", time.Since(began).Round(100*time.Millisecond), tailLines(strings.TrimSpace(stderr), 1))
}

func execSQL(ctx context.Context, t *testing.T, pg, stmt string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// asRole is the Postgres URL pg for another role (and password, when not "").
func asRole(t *testing.T, pg, role, password string) string {
	u, err := url.Parse(pg)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	if password != "" {
		u.User = url.UserPassword(role, password)
	}
	return u.String()
}

// hasMetric reports whether a sample of the exposition text starts with name and has value.
func hasMetric(text, name, value string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, name) && strings.HasSuffix(line, " "+value) {
			return true
		}
	}
	return false
}

func grepLines(text, s string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
