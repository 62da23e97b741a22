package cdc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChild()
		return
	}
	testenv.Main(m)
}

// env is one test's Postgres database, Kafka brokers and unique names.
type env struct {
	pgURL   string
	brokers []string
	app     string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return &env{pgURL: testenv.Postgres(t), brokers: testenv.Kafka(t), app: uniqueName(t)}
}

func uniqueName(t testing.TB) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	return name + "-" + hex.EncodeToString(b)
}

func (e *env) config(t *testing.T, tables ...string) Config {
	return Config{
		PostgresURL:       e.pgURL,
		App:               e.app,
		Tables:            tables,
		Brokers:           e.brokers,
		KafkaOptions:      []kgo.Opt{kgo.MetadataMinAge(250 * time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond })},
		Dir:               t.TempDir(),
		BatchInterval:     20 * time.Millisecond,
		StatusInterval:    time.Second,
		HeartbeatInterval: time.Second,
		Logger:            slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func (e *env) conn(t *testing.T) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), e.pgURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func mustExec(t *testing.T, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// running is a Source running in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, cfg Config) *running {
	t.Helper()
	src, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- src.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	if err := <-r.done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// topicState is a table topic applied the way a table store applies it: in order, skipping
// records that are not after the last applied position of their partition, tombstones delete,
// truncate markers clear the partition.
type topicState struct {
	rows    map[string]string
	records int
	dups    int
}

// readState reads the topics' state; a failure (e.g. a topic not created yet) is returned for
// eventually to retry.
func readState(t *testing.T, brokers []string, topics ...string) (topicState, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := topicState{rows: map[string]string{}}
	type tp struct {
		t string
		p int32
	}
	last := map[tp]Position{}
	byPart := map[tp]map[string]bool{}
	err := readToEnd(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, topics, func(r *kgo.Record) error {
		p, err := RecordPosition(r)
		if err != nil {
			return err
		}
		k := tp{r.Topic, r.Partition}
		if prev, ok := last[k]; ok && !prev.Less(p) {
			st.dups++
			return nil
		}
		last[k] = p
		st.records++
		if byPart[k] == nil {
			byPart[k] = map[string]bool{}
		}
		key := r.Topic + "|" + string(r.Key)
		switch {
		case IsTruncate(r):
			for key := range byPart[k] {
				delete(st.rows, key)
			}
			byPart[k] = map[string]bool{}
		case r.Value == nil:
			delete(st.rows, key)
			delete(byPart[k], key)
		default:
			st.rows[key] = string(r.Value)
			byPart[k][key] = true
		}
		return nil
	})
	return st, err
}

// stateOf polls readState for eventually: it returns the rows, or nil and the error.
func stateOf(t *testing.T, brokers []string, topics ...string) (map[string]string, string) {
	st, err := readState(t, brokers, topics...)
	if err != nil {
		return nil, err.Error()
	}
	return st.rows, ""
}

// tableJSON is SELECT * FROM table as Postgres's own JSON, keyed like the topic.
func tableJSON(t *testing.T, c *pgx.Conn, topicName, table, keyCol string) map[string]string {
	t.Helper()
	rows, err := c.Query(context.Background(), fmt.Sprintf("SELECT %s::text, row_to_json(x)::text FROM %s x", keyCol, table))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[topicName+"|"+k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameJSON compares two JSON objects by value, numbers by their text.
func sameJSON(a, b string) bool {
	var x, y any
	da, db := json.NewDecoder(strings.NewReader(a)), json.NewDecoder(strings.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&x) != nil || db.Decode(&y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

// diffStates describes how got differs from want, or returns "".
func diffStates(got, want map[string]string) string {
	var diffs []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			diffs = append(diffs, "missing "+k)
		case !sameJSON(g, w):
			diffs = append(diffs, fmt.Sprintf("%s: got %s want %s", k, g, w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, "extra "+k)
		}
	}
	if len(diffs) == 0 {
		return ""
	}
	if len(diffs) > 5 {
		diffs = append(diffs[:5], fmt.Sprintf("... %d differences", len(diffs)))
	}
	return strings.Join(diffs, "\n")
}

// eventually polls check until it returns "" or the deadline passes (the deadline only bounds
// a failing test; nothing asserts on time).
func eventually(t *testing.T, limit time.Duration, check func() string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		msg := check()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", limit, msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runErr runs a source until it fails (or 60s pass) and returns its error.
func runErr(t *testing.T, cfg Config) error {
	t.Helper()
	src, err := New(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = src.Run(ctx)
	if err == nil {
		return errors.New("Run returned nil (ran until the test's deadline)")
	}
	return err
}
