package cdc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
)

// wantRows waits until the topic's state is exactly want (key → row JSON).
func wantRows(t *testing.T, e *env, tp string, want map[string]string) {
	t.Helper()
	full := map[string]string{}
	for k, v := range want {
		full[tp+"|"+k] = v
	}
	eventually(t, 30*time.Second, func() string {
		rows, msg := stateOf(t, e.brokers, tp)
		if msg != "" {
			return msg
		}
		return diffStates(rows, full)
	})
}

// TestSchemaChange adds and drops columns mid-stream; the next records reflect each change.
func TestSchemaChange(t *testing.T) {
	e := newEnv(t)
	c := e.conn(t)
	mustExec(t, c, "CREATE TABLE s (id int PRIMARY KEY, a text)")
	mustExec(t, c, "INSERT INTO s VALUES (1, 'one')")
	start(t, e.config(t, "public.s"))
	tp := topic.CDCTable(e.app, "public", "s")
	wantRows(t, e, tp, map[string]string{"1": `{"id":1,"a":"one"}`})
	mustExec(t, c, "ALTER TABLE s ADD COLUMN c int DEFAULT 7")
	mustExec(t, c, "INSERT INTO s VALUES (2, 'two', 8)")
	mustExec(t, c, "UPDATE s SET a = 'uno' WHERE id = 1")
	mustExec(t, c, "ALTER TABLE s DROP COLUMN a")
	mustExec(t, c, "INSERT INTO s VALUES (3, 9)")
	mustExec(t, c, "ALTER TABLE s ALTER COLUMN c TYPE numeric")
	mustExec(t, c, "UPDATE s SET c = 2.5 WHERE id = 2")
	wantRows(t, e, tp, map[string]string{
		"1": `{"id":1,"a":"uno","c":7}`,
		"2": `{"id":2,"c":2.5}`,
		"3": `{"id":3,"c":9}`,
	})
}

// TestTruncate empties a table: markers on every partition clear the topic's state, and
// later inserts are kept.
func TestTruncate(t *testing.T) {
	e := newEnv(t)
	c := e.conn(t)
	mustExec(t, c, "CREATE TABLE tr (id int PRIMARY KEY)")
	mustExec(t, c, "INSERT INTO tr SELECT generate_series(1, 100)")
	cfg := e.config(t, "public.tr")
	cfg.Partitions = 4
	start(t, cfg)
	tp := topic.CDCTable(e.app, "public", "tr")
	snap := map[string]string{}
	for i := 1; i <= 100; i++ {
		snap[itoa(i)] = `{"id":` + itoa(i) + `}`
	}
	wantRows(t, e, tp, snap)
	mustExec(t, c, "INSERT INTO tr VALUES (101)")
	mustExec(t, c, "TRUNCATE tr")
	mustExec(t, c, "INSERT INTO tr VALUES (7)")
	wantRows(t, e, tp, map[string]string{"7": `{"id":7}`})
	st, err := readState(t, e.brokers, tp)
	if err != nil {
		t.Fatal(err)
	}
	// The snapshot opens with one marker per partition, the TRUNCATE adds one per partition.
	if want := 100 + 1 + 1 + 2*4; st.records != want {
		t.Errorf("%d records, want %d (100 snapshot rows, 2 inserts, 2×4 truncate markers)", st.records, want)
	}
}

// TestNoPrimaryKey refuses a table without a primary key, naming it, and replicates it once
// it has REPLICA IDENTITY FULL, keyed by all its columns.
func TestNoPrimaryKey(t *testing.T) {
	e := newEnv(t)
	c := e.conn(t)
	mustExec(t, c, "CREATE TABLE nopk (a int, b text)")
	mustExec(t, c, "CREATE TABLE ok (id int PRIMARY KEY)")
	err := runErr(t, e.config(t, "public.ok", "public.nopk"))
	if !errors.Is(err, ErrNoPrimaryKey) || !IsPermanent(err) || !strings.Contains(err.Error(), "public.nopk") {
		t.Fatalf("Run = %v, want ErrNoPrimaryKey naming public.nopk", err)
	}
	mustExec(t, c, "ALTER TABLE nopk REPLICA IDENTITY FULL")
	mustExec(t, c, "INSERT INTO nopk VALUES (1, 'x'), (2, NULL)")
	start(t, e.config(t, "public.nopk"))
	mustExec(t, c, "INSERT INTO nopk VALUES (3, 'y')")
	mustExec(t, c, "UPDATE nopk SET b = 'z' WHERE a = 1")
	mustExec(t, c, "DELETE FROM nopk WHERE a = 3")
	tp := topic.CDCTable(e.app, "public", "nopk")
	wantRows(t, e, tp, map[string]string{
		`["1","z"]`:  `{"a":1,"b":"z"}`,
		`["2",null]`: `{"a":2,"b":null}`,
	})
}

// TestMissingPublication: the source creates a missing publication on its first start; one
// dropped later stops the running source and refuses a restart, with ErrPublicationMissing.
func TestMissingPublication(t *testing.T) {
	e := newEnv(t)
	c := e.conn(t)
	mustExec(t, c, "CREATE TABLE p (id int PRIMARY KEY)")
	cfg := e.config(t, "public.p")
	src, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- src.Run(context.Background()) }()
	tp := topic.CDCTable(e.app, "public", "p")
	mustExec(t, c, "INSERT INTO p VALUES (1)")
	wantRows(t, e, tp, map[string]string{"1": `{"id":1}`})

	mustExec(t, c, "DROP PUBLICATION "+defaultName(e.app))
	mustExec(t, c, "INSERT INTO p VALUES (2)")
	select {
	case err := <-done:
		if !errors.Is(err, ErrPublicationMissing) || !IsPermanent(err) {
			t.Fatalf("running source: Run = %v, want ErrPublicationMissing, permanent", err)
		}
		t.Logf("running source: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the source kept running without its publication")
	}
	cfg.Registerer = nil
	if err := runErr(t, cfg); !errors.Is(err, ErrPublicationMissing) || !IsPermanent(err) {
		t.Fatalf("restart: Run = %v, want ErrPublicationMissing, permanent", err)
	}
}
