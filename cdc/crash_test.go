package cdc

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	crashChildEnv  = "TARN_CDC_CRASH_CHILD"
	crashConfigEnv = "TARN_CDC_CRASH_CONFIG"
)

// crashConfig is what the parent hands the child CDC process.
type crashConfig struct {
	PostgresURL   string
	App           string
	Brokers       []string
	Dir           string
	Transactional bool
}

// crashChild runs a Source until it is killed; TestMain calls it in the re-executed binary.
func crashChild() {
	var cc crashConfig
	if err := json.Unmarshal([]byte(os.Getenv(crashConfigEnv)), &cc); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	src, err := New(Config{
		PostgresURL: cc.PostgresURL, App: cc.App, Tables: []string{"public.counters"}, Brokers: cc.Brokers,
		KafkaOptions:  []kgo.Opt{kgo.MetadataMinAge(250 * time.Millisecond)},
		Dir:           cc.Dir,
		Transactional: cc.Transactional, TransactionTimeout: 10 * time.Second,
		BatchInterval: 20 * time.Millisecond, StatusInterval: time.Second, HeartbeatInterval: time.Second,
		SnapshotChunkRows: 500, BatchRecords: 2000,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err == nil {
		err = src.Run(context.Background())
	}
	fmt.Fprintln(os.Stderr, "crash child: Run:", err)
	os.Exit(1)
}

// TestCrashNoLoss kills the CDC process with SIGKILL at random moments five times during a
// 100k-change workload. Every change must be in the topic afterwards: each row's counter
// goes up by exactly one per record (transactional mode: no duplicates at all), and the final
// state equals the table.
func TestCrashNoLoss(t *testing.T) {
	for _, txn := range []bool{true, false} {
		t.Run(fmt.Sprintf("transactional=%v", txn), func(t *testing.T) { crashTest(t, txn) })
	}
}

func crashTest(t *testing.T, transactional bool) {
	e := newEnv(t)
	c := e.conn(t)
	mustExec(t, c, `CREATE TABLE counters (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	mustExec(t, c, `INSERT INTO counters SELECT g, 0, repeat('x', 100) FROM generate_series(1, 2000) g`)
	cc := crashConfig{PostgresURL: e.pgURL, App: e.app, Brokers: e.brokers, Dir: t.TempDir(), Transactional: transactional}
	cfgJSON, _ := json.Marshal(cc)

	done := make(chan int, 1)
	go func() { done <- counterLoad(t, e, 100000) }()
	loadStart := time.Now()
	for kill := 0; kill < 5; kill++ {
		child := startChild(t, string(cfgJSON))
		if kill > 0 {
			// The first kill may hit the snapshot; the others hit the stream.
			waitPosition(t, e)
		}
		time.Sleep(time.Duration(300+rand.IntN(1500)) * time.Millisecond)
		if err := child.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = child.Wait()
	}
	child := startChild(t, string(cfgJSON))
	defer stopChild(t, child)
	t.Logf("workload: %d changes in %s", <-done, time.Since(loadStart).Round(time.Millisecond))

	tp := topic.CDCTable(e.app, "public", "counters")
	want := tableJSON(t, c, tp, "counters", "id")
	eventually(t, 90*time.Second, func() string {
		rows, msg := stateOf(t, e.brokers, tp)
		if msg != "" {
			return msg
		}
		return diffStates(rows, want)
	})
	checkCounters(t, e.brokers, tp, transactional)
}

// waitPosition waits until the source has a durable position (its snapshot is done).
func waitPosition(t *testing.T, e *env) {
	t.Helper()
	cfg := Config{App: e.app, Slot: defaultName(e.app), Brokers: e.brokers}
	eventually(t, 60*time.Second, func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pos, err := readPosition(ctx, &cfg, nil, topic.CDCPosition(e.app, cfg.Slot))
		if err != nil || pos == nil {
			return fmt.Sprintf("no position yet (%v)", err)
		}
		return ""
	})
}

func startChild(t *testing.T, cfg string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"=1", crashConfigEnv+"="+cfg)
	cmd.Stderr = testWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func stopChild(t *testing.T, cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

// counterLoad makes n changes in transactions of 1 to 20 statements: mostly increments of a
// random counter, some inserts of new rows and some deletes.
func counterLoad(t *testing.T, e *env, n int) int {
	c := e.conn(t)
	next, made := 2001, 0
	for made < n {
		var b strings.Builder
		b.WriteString("BEGIN;")
		for k := 1 + rand.IntN(20); k > 0 && made < n; k-- {
			switch r := rand.IntN(100); {
			case r < 4:
				fmt.Fprintf(&b, "INSERT INTO counters VALUES (%d, 0, 'new');", next)
				next++
			case r < 6:
				fmt.Fprintf(&b, "DELETE FROM counters WHERE id = %d;", 1+rand.IntN(next-1))
			default:
				fmt.Fprintf(&b, "UPDATE counters SET v = v + 1 WHERE id = %d;", 1+rand.IntN(next-1))
			}
			made++
		}
		b.WriteString("COMMIT;")
		if _, err := c.Exec(context.Background(), b.String()); err != nil {
			t.Errorf("load: %v", err)
			return made
		}
		time.Sleep(time.Millisecond) // spread the load over the kills

	}
	return made
}

// checkCounters reads the raw topic: after the last truncate marker of its partition, each
// key's values must go up by exactly one per record. In at-least-once mode a record may
// repeat, but only with a (lsn, seq) not after one already seen.
func checkCounters(t *testing.T, brokers []string, tp string, transactional bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type key struct {
		p int32
		k string
	}
	lastV := map[key]int{}
	lastPos := map[int32]Position{}
	var gaps, dups, records int
	ops := map[Op]int{}
	err := readToEnd(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, []string{tp}, func(r *kgo.Record) error {
		pos, err := RecordPosition(r)
		if err != nil {
			return err
		}
		if prev, ok := lastPos[r.Partition]; ok && !prev.Less(pos) {
			dups++
			return nil
		}
		lastPos[r.Partition] = pos
		records++
		op, _ := RecordOp(r)
		ops[op]++
		if IsTruncate(r) {
			for k := range lastV {
				if k.p == r.Partition {
					delete(lastV, k)
				}
			}
			return nil
		}
		k := key{r.Partition, string(r.Key)}
		if r.Value == nil {
			lastV[k] = -2 // deleted: nothing may follow
			return nil
		}
		var row struct{ V int }
		if err := json.Unmarshal(r.Value, &row); err != nil {
			return err
		}
		prev, ok := lastV[k]
		if !ok && op != OpSnapshot {
			prev, ok = -1, true // a row first seen in the stream starts at its insert, v = 0
		}
		if ok && row.V != prev+1 {
			gaps++
			if gaps <= 5 {
				t.Errorf("key %s: value %d after %d at %s", r.Key, row.V, prev, pos)
			}
		}
		lastV[k] = row.V
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d records %v, %d duplicates skipped, %d gaps", records, ops, dups, gaps)
	if transactional && dups > 0 {
		t.Errorf("transactional mode wrote %d duplicate records", dups)
	}
}
