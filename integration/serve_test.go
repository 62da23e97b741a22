package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/testenv"
)

// instance is one `tarn serve` process under test.
type instance struct {
	cmd     *exec.Cmd
	base    string
	dataDir string
	stderr  *strings.Builder
	exited  chan error
}

func buildTarn(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "tarn")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/tarn").CombinedOutput(); err != nil {
		t.Fatalf("build tarn: %v\n%s", err, out)
	}
	return bin
}

func startServe(t *testing.T, bin string, args ...string) *instance {
	return startServeIn(t, bin, t.TempDir(), args...)
}

// startServeIn starts `tarn serve` on the data folder dataDir (a restart when it was used before).
func startServeIn(t *testing.T, bin, dataDir string, args ...string) *instance {
	return startServeAt(t, bin, freeAddr(t), dataDir, args...)
}

// startServeAt starts `tarn serve` listening on addr: a restart where an instance was.
func startServeAt(t *testing.T, bin, addr, dataDir string, args ...string) *instance {
	in := &instance{base: "http://" + addr, dataDir: dataDir, stderr: &strings.Builder{}, exited: make(chan error, 1)}
	in.cmd = exec.Command(bin, append([]string{"serve", "--http", addr, "--data-dir", in.dataDir}, args...)...)
	in.cmd.Stderr = in.stderr
	if err := in.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { in.exited <- in.cmd.Wait() }()
	t.Cleanup(func() {
		in.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("tarn serve %s stderr (tail):\n%s", in.base, tailLines(in.stderr.String(), 30))
		}
	})
	return in
}

// TestServeTwoInstances runs two `tarn serve` processes of one app on real Kafka and Postgres:
// the views' partitions split between them, and every key reads the same through either, the
// one that does not own it proxying to the one that does. `tarn status` and `tarn migrate` are
// exercised against them too.
func TestServeTwoInstances(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	brokers := strings.Join(testenv.Kafka(t), ",")
	pg := testenv.Postgres(t)
	bin := buildTarn(t)
	app := fmt.Sprintf("it%d", time.Now().UnixNano()%1e9)

	if out, err := exec.Command(bin, "migrate", "--postgres", pg).CombinedOutput(); err != nil || !strings.Contains(string(out), "version 1") {
		t.Fatalf("tarn migrate: %v\n%s", err, out)
	}
	requireNoDemoTables(ctx, t, pg)
	migrate(ctx, t, pg)
	cl, err := kgo.NewClient(kgo.SeedBrokers(testenv.Kafka(t)...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The event topics of cmd/tarn's views (the views refuse to start without their inputs).
	for _, name := range []string{"trades", "clicks", "impressions", "ad-clicks"} {
		if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, name); err != nil && !strings.Contains(err.Error(), "EXISTS") {
			t.Fatal(err)
		}
	}
	// Trades of six symbols; the expected price range of each is computed here.
	want := map[string][2]float64{}
	for i := 0; i < 600; i++ {
		sym := fmt.Sprintf("S%d", i%6)
		price := float64(100 + (i*37)%50)
		r := want[sym]
		if r == [2]float64{} || price < r[0] {
			r[0] = price
		}
		if price > r[1] {
			r[1] = price
		}
		want[sym] = r
		v, _ := json.Marshal(map[string]any{"id": fmt.Sprint(i), "symbol": sym, "price": price, "qty": 1, "time": time.Now().UTC()})
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "trades", Key: []byte(fmt.Sprint(i)), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	common := []string{"--app", app, "--kafka", brokers, "--postgres", pg}
	a := startServe(t, bin, common...)
	b := startServe(t, bin, common...)

	for _, in := range []*instance{a, b} {
		waitReady(t, in, 2*time.Minute, "readyz")
	}
	owned := func(in *instance) int { ps, _ := priceRangeParts(in); return len(ps) }
	waitServe(t, a, 2*time.Minute, "price-range's partitions to split between the instances", func() bool {
		na, nb := owned(a), owned(b)
		return na+nb == 3 && na > 0 && nb > 0
	})
	// Both instances answer every key, whichever owns it.
	for _, in := range []*instance{a, b} {
		for sym, r := range want {
			waitServe(t, in, time.Minute, "price-range "+sym+" via "+in.base, func() bool {
				code, body := get(in.base + "/v1/views/price-range/keys/" + sym)
				if code != http.StatusOK {
					return false
				}
				var got struct{ Value struct{ Min, Max float64 } }
				json.Unmarshal([]byte(body), &got)
				return got.Value.Min == r[0] && got.Value.Max == r[1]
			})
		}
	}
	// A scan through either instance fans out to the other and sees every symbol.
	for _, in := range []*instance{a, b} {
		var page struct{ Entries []struct{ Key string } }
		decode(t, in.base+"/v1/views/price-range?prefix=S&limit=100", &page) // other tests trade other symbols
		if len(page.Entries) != len(want) {
			t.Errorf("scan via %s returned %d keys, want %d", in.base, len(page.Entries), len(want))
		}
	}

	out, err := exec.Command(bin, "status", "--http", strings.TrimPrefix(a.base, "http://")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "price-range") || !strings.Contains(string(out), "running") {
		t.Fatalf("tarn status: %v\n%s", err, out)
	}
	// tarn rebuild starts a new version beside the serving one; status then reports it.
	out, err = exec.Command(bin, "rebuild", "--http", strings.TrimPrefix(b.base, "http://"), "price-range").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"version": 2`) {
		t.Fatalf("tarn rebuild: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "status", "--http", strings.TrimPrefix(a.base, "http://")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "v2") {
		t.Fatalf("tarn status after rebuild shows no v2: %v\n%s", err, out)
	}
	for _, in := range []*instance{a, b} {
		in.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-in.exited:
			if err != nil {
				t.Errorf("tarn serve exited with %v after SIGTERM", err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("tarn serve did not stop within 60s of SIGTERM")
		}
	}
	// tarn reset deletes the local stores (they restore from the changelogs).
	if out, err := exec.Command(bin, "reset", "--data-dir", a.dataDir).CombinedOutput(); err == nil {
		t.Fatalf("tarn reset without \"yes\" succeeded:\n%s", out)
	}
	if out, err := exec.Command(bin, "reset", "--data-dir", a.dataDir, "yes").CombinedOutput(); err != nil {
		t.Fatalf("tarn reset: %v\n%s", err, out)
	}
	if _, err := os.Stat(a.dataDir); !os.IsNotExist(err) {
		t.Fatalf("%s still exists after tarn reset", a.dataDir)
	}
}

func waitServe(t *testing.T, in *instance, limit time.Duration, what any, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		select {
		case err := <-in.exited:
			t.Fatalf("tarn serve %s exited (%v) while waiting for %v", in.base, err, what)
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %v", limit, what)
		}
	}
}
