package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDemo runs `tarn demo` as a user would, queries every example view over HTTP, watches one
// key live, stops it with SIGINT, and checks that nothing is left running or listening.
func TestDemo(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tarn")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/tarn").CombinedOutput(); err != nil {
		t.Fatalf("build tarn: %v\n%s", err, out)
	}
	addr := freeAddr(t)
	dataDir := t.TempDir()
	var stdout, stderr strings.Builder
	cmd := exec.Command(bin, "demo", "--http", addr, "--data-dir", dataDir)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// The demo's throwaway Postgres lives under TMPDIR: one of this test's own, so that the
	// check for leftovers below sees this demo's processes only, not another one's.
	tmp := t.TempDir()
	cmd.Env = append(os.Environ(), "TARN_LOG_LEVEL=info", "TMPDIR="+tmp)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if t.Failed() {
			cmd.Process.Kill()
			t.Logf("demo stdout:\n%s\ndemo stderr (tail):\n%s", stdout.String(), tailLines(stderr.String(), 40))
		}
	}()
	base := "http://" + addr

	waitFor(t, exited, 2*time.Minute, "the demo to be ready with data in every view", func() bool {
		for _, path := range []string{
			"/v1/views/price-range/keys/ACME",
			"/v1/views/orders-per-customer/keys/7",
			"/v1/views/top-trades/keys/all?from=2000-01-01T00:00:00Z",
			"/v1/views/clicks-by-country?limit=10",
			"/v1/views/campaign-funnel?limit=10",
		} {
			if code, body := get(base + path); code != http.StatusOK || strings.Contains(body, `"windows":[]`) || strings.Contains(body, `"entries":[]`) {
				return false
			}
		}
		return true
	})

	var pr struct {
		Value struct {
			Min, Max float64
			Count    int
		}
	}
	decode(t, base+"/v1/views/price-range/keys/ACME", &pr)
	if pr.Value.Count == 0 || pr.Value.Min > pr.Value.Max {
		t.Fatalf("price-range ACME = %+v", pr.Value)
	}
	var orders struct {
		Value struct {
			Orders int64
			Total  float64
		}
	}
	decode(t, base+"/v1/views/orders-per-customer/keys/7", &orders)
	if orders.Value.Orders <= 0 {
		t.Fatalf("orders-per-customer 7 = %+v", orders.Value)
	}
	var funnel struct {
		Entries []struct {
			Key   string
			Value struct{ Impressions, Clicks int64 }
		}
	}
	decode(t, base+"/v1/views/campaign-funnel?limit=10", &funnel)
	for _, e := range funnel.Entries {
		if e.Value.Clicks > e.Value.Impressions {
			t.Fatalf("campaign-funnel %s: %d clicks on %d impressions", e.Key, e.Value.Clicks, e.Value.Impressions)
		}
	}
	if code, body := get(base + "/"); code != http.StatusOK || !strings.Contains(body, "tarn views") {
		t.Fatalf("web page: %d %q", code, body[:min(len(body), 200)])
	}

	watchOneChange(t, base+"/v1/views/price-range/keys/ACME?watch=sse")
	checkWebPage(t, base)

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("demo exited with %v after SIGINT", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("demo did not stop within 60s of SIGINT")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after the demo stopped", addr)
	}
	if leftovers := processesMentioning(tmp); len(leftovers) > 0 {
		t.Fatalf("processes left behind: %v", leftovers)
	}
}

// watchOneChange opens a live watch and waits for a change event.
func watchOneChange(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("watch Content-Type = %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "event: change" {
			return
		}
	}
	t.Fatalf("no change event on %s: %v", url, sc.Err())
}

func waitFor(t *testing.T, exited <-chan error, limit time.Duration, what string, ok func() bool) {
	deadline := time.Now().Add(limit)
	for !ok() {
		select {
		case err := <-exited:
			t.Fatalf("demo exited (%v) while waiting for %s", err, what)
		case <-time.After(500 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
	}
}

func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func decode(t *testing.T, url string, into any) {
	code, body := get(url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	if err := json.Unmarshal([]byte(body), into); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// processesMentioning lists running processes whose command line contains s (a path of the
// test's own, so that nothing else on the machine matches).
func processesMentioning(s string) []string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err == nil && strings.Contains(string(b), s) {
			found = append(found, fmt.Sprintf("%s: %s", filepath.Base(filepath.Dir(d)), strings.ReplaceAll(string(b), "\x00", " ")))
		}
	}
	return found
}

func tailLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
