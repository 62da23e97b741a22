package state_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/state"
	"github.com/tarnhq/tarn/state/statetest"
)

// Environment of the crash test's child process.
const (
	envCrashDir     = "TARN_STATE_CRASH_DIR"
	envCrashBrokers = "TARN_STATE_CRASH_BROKERS"
	envCrashView    = "TARN_STATE_CRASH_VIEW"
)

const (
	crashKeys     = 5000 // the "k" key space, rewritten every crashKeys/crashPerBatch batches
	crashPerBatch = 200
	crashKillAt   = 40 // acknowledged batches before the kill
)

// TestCrashMidWrite runs a writer in a subprocess, kills it with SIGKILL while it writes,
// restarts from its directory and checks that the store equals the changelog and holds every
// acknowledged batch.
func TestCrashMidWrite(t *testing.T) {
	if os.Getenv(envCrashDir) != "" {
		crashChild(t)
		return
	}
	brokers := testenv.Kafka(t)
	id := newID(t, "kv", 0)
	ensure(t, brokers, id, 1)
	dir := filepath.Join(t.TempDir(), "db")

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashMidWrite$")
	cmd.Env = append(os.Environ(), envCrashDir+"="+dir, envCrashBrokers+"="+strings.Join(brokers, ","), envCrashView+"="+id.View)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := -1
	sc := bufio.NewScanner(out)
	for acked < crashKillAt && sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			acked, _ = strconv.Atoi(n)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if acked < crashKillAt {
		t.Fatalf("child stopped after %d acknowledged batches, before the kill", acked)
	}

	db := openDir(t, dir)
	defer closeDB(t, db)
	kv := mustKV(t, db, id)
	st, err := db.Restore(context.Background(), restoreCfg(brokers), kv)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed after %d acknowledged batches; restore read %d records from offset %d", acked, st.Records, st.Partitions[0].From)
	got := dumpKV(t, kv, db)
	equalMaps(t, "store vs changelog after crash", got, readChangelog(t, brokers, id.Topic(), 0))
	checkAcked(t, got, acked)
}

// checkAcked checks that the effects of batches 0..acked are all present: batch i wrote
// value i (or a later batch a larger one) to its k keys, put d<i> and deleted d<i-1>.
func checkAcked(t *testing.T, got map[string]string, acked int) {
	for i := 0; i <= acked; i++ {
		for j := range crashPerBatch {
			k := fmt.Sprintf("k%05d", (i*crashPerBatch+j)%crashKeys)
			v, err := strconv.Atoi(got[k])
			if err != nil || v < i {
				t.Fatalf("acknowledged batch %d: %s = %q, want >= %d", i, k, got[k], i)
			}
		}
		if _, ok := got[fmt.Sprintf("d%05d", i)]; i < acked && ok {
			t.Fatalf("acknowledged batch %d deleted d%05d, but it is present", i+1, i)
		}
	}
	if _, ok := got[fmt.Sprintf("d%05d", acked)]; !ok {
		if _, next := got[fmt.Sprintf("d%05d", acked+1)]; !next {
			t.Fatalf("d%05d of the last acknowledged batch is missing", acked)
		}
	}
}

// crashChild writes batches until it is killed, printing "acked i" once batch i is durable
// in Kafka (before applying it locally, so the kill also lands between the two phases).
func crashChild(t *testing.T) {
	brokers := strings.Split(os.Getenv(envCrashBrokers), ",")
	id := state.ID{App: "test", View: os.Getenv(envCrashView), Version: 1, Store: "kv"}
	db, err := state.Open(state.Config{Dir: os.Getenv(envCrashDir), MemoryBytes: 64 << 20, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	kv := mustKV(t, db, id)
	cl := statetest.Client(t, brokers)
	ctx := context.Background()
	for i := 0; i < 100_000; i++ { // bounded, in case the parent dies without killing us
		txn := db.NewTxn()
		for j := range crashPerBatch {
			_ = kv.Put(txn, fmt.Appendf(nil, "k%05d", (i*crashPerBatch+j)%crashKeys), []byte(strconv.Itoa(i)))
		}
		_ = kv.Put(txn, fmt.Appendf(nil, "d%05d", i), []byte("x"))
		_ = kv.Delete(txn, fmt.Appendf(nil, "d%05d", i-1))
		if err := txn.Produce(ctx, cl); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("acked %d\n", i)
		if err := txn.Apply(); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("crash child was never killed")
}
