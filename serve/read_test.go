package serve_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tarnhq/tarn/serve"
)

func TestGet(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("orders", 4, false)
	c := v.apply(t, []byte("o-1"), map[string]any{"total": 12})
	ts := start(t, b)

	r := get(t, keyURL(ts.URL, "orders", "o-1")).want(t, http.StatusOK)
	var body valueBody
	r.decode(t, &body)
	if body.View != "orders" || body.Key != "o-1" || string(body.Value) != `{"total":12}` {
		t.Fatalf("body %s", r.body)
	}
	if got := body.Position.Offsets[c.Partition]; got != c.Offset+1 {
		t.Fatalf("position offset of partition %d = %d, want %d", c.Partition, got, c.Offset+1)
	}
	hdr, err := serve.ParsePosition(r.Header.Get("Tarn-Position"))
	if err != nil || hdr.Token() != body.Position.Token() {
		t.Fatalf("Tarn-Position %q (%v) differs from the body's %q", r.Header.Get("Tarn-Position"), err, body.Position.Token())
	}
	if r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("Content-Type %q", r.Header.Get("Content-Type"))
	}
}

func TestGetKeysNeedingEscapes(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 2, false)
	keys := []string{"a/b", "100%", "sp ace", "ünï", "?#&="}
	for i, k := range keys {
		v.apply(t, []byte(k), i)
	}
	v.apply(t, []byte{0xff, 0x00}, "binary")
	ts := start(t, b)
	for i, k := range keys {
		var body valueBody
		get(t, keyURL(ts.URL, "v", k)).want(t, http.StatusOK).decode(t, &body)
		if body.Key != k || string(body.Value) != fmt.Sprint(i) {
			t.Fatalf("key %q: body %+v", k, body)
		}
	}
	var body valueBody
	get(t, keyURL(ts.URL, "v", "_wA", "enc=b64")).want(t, http.StatusOK).decode(t, &body)
	if body.Key != "_wA" || string(body.Value) != `"binary"` {
		t.Fatalf("binary key: %+v", body)
	}
}

func TestGetMissingKeyIs404WithPosition(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 2, false)
	v.apply(t, []byte("present"), 1)
	ts := start(t, b)
	r := get(t, keyURL(ts.URL, "v", "absent")).want(t, http.StatusNotFound)
	p := r.problem(t)
	if p.Type != "urn:tarn:problem:no-key" || p.Position == nil || p.Position.IsZero() {
		t.Fatalf("problem %+v", p)
	}
	if r.Header.Get("Tarn-Position") != p.Position.Token() {
		t.Fatalf("header %q, body %q", r.Header.Get("Tarn-Position"), p.Position.Token())
	}
	get(t, keyURL(ts.URL, "nope", "k")).want(t, http.StatusNotFound).problem(t)
}

func TestETagAndNotModified(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 2, false)
	v.apply(t, []byte("k"), 1)
	ts := start(t, b)
	first := get(t, keyURL(ts.URL, "v", "k")).want(t, http.StatusOK)
	etag := first.Header.Get("ETag")
	if !strings.HasPrefix(etag, `W/"`) {
		t.Fatalf("ETag %q", etag)
	}
	// Another key changing moves the position but not this key's ETag.
	v.apply(t, []byte("other"), 2)
	r := do(t, http.MethodGet, keyURL(ts.URL, "v", "k"), http.Header{"If-None-Match": {etag}}).want(t, http.StatusNotModified)
	if len(r.body) != 0 || r.Header.Get("Tarn-Position") == "" {
		t.Fatalf("304 with body %q, position %q", r.body, r.Header.Get("Tarn-Position"))
	}
	v.apply(t, []byte("k"), 3)
	r = do(t, http.MethodGet, keyURL(ts.URL, "v", "k"), http.Header{"If-None-Match": {etag}}).want(t, http.StatusOK)
	if r.Header.Get("ETag") == etag {
		t.Fatal("ETag did not change with the value")
	}
}

func TestBadParameters(t *testing.T) {
	b := newPebbleBackend(t)
	b.addView("v", 2, false)
	ts := start(t, b)
	for _, tc := range []struct{ path, param string }{
		{"/v1/views/v/keys/k?limit=3", "limit"},
		{"/v1/views/v/keys/k?enc=hex", "enc"},
		{"/v1/views/v/keys/%FF", "key"},
		{"/v1/views/v/keys/***?enc=b64", "key"},
		{"/v1/views/v/keys/k?after=nope", "after"},
		{"/v1/views/v/keys/k?min_offsets=0", "min_offsets"},
		{"/v1/views/v/keys/k?min_offsets=0:1,0:2", "min_offsets"},
		{"/v1/views/v/keys/k?min_lsn=12", "min_lsn"},
		{"/v1/views/v/keys/k?wait=-1s", "wait"},
		{"/v1/views/v/keys/k?wait=1h", "wait"},
		{"/v1/views/v/keys/k?watch=ws", "watch"},
		{"/v1/views/v/keys/k?from=yesterday", "from"},
		{"/v1/views/v/keys/k?from=10&to=5", "to"},
		{"/v1/views/v/keys/k?stale=true", "stale"}, // not a parameter (any more): said so
		{"/v1/views/v?limit=0", "limit"},
		{"/v1/views/v?limit=10001", "limit"},
		{"/v1/views/v?limit=ten", "limit"},
		{"/v1/views/v?cursor=AA", "cursor"},
		{"/v1/views/v?cursor=%%%", "cursor"},
		{"/v1/views/v?prefix=a&start=b", "prefix"},
		{"/v1/views/v?start=b&end=a", "end"},
		{"/v1/views/v?partitions=1,0", "partitions"},
		{"/v1/views/v?partitions=7", "partitions"},
		{"/v1/views/v?limit=1&limit=2", "limit"},
		{"/v1/views/v/changes?limit=2", "limit"},
	} {
		r := get(t, ts.URL+tc.path).want(t, http.StatusBadRequest)
		if p := r.problem(t); p.Param != tc.param || p.Detail == "" {
			t.Errorf("%s: problem %+v, want param %s", tc.path, p, tc.param)
		}
	}
	r := get(t, ts.URL+"/v1/views/v/keys/k?wait=1s&watch=sse").want(t, http.StatusBadRequest)
	if r.problem(t).Param != "wait" {
		t.Error("wait with watch")
	}
	r = do(t, http.MethodGet, ts.URL+"/v1/views/v/changes", http.Header{"Last-Event-ID": {"zz"}}).want(t, http.StatusBadRequest)
	if r.problem(t).Param != "Last-Event-ID" {
		t.Error("bad Last-Event-ID")
	}
	get(t, ts.URL+"/v2/views").want(t, http.StatusNotFound).problem(t)
	do(t, http.MethodDelete, ts.URL+"/v1/views", nil).want(t, http.StatusMethodNotAllowed).problem(t)
}

func TestWindows(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("clicks", 2, true)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		s := t0.Add(time.Duration(i) * time.Minute)
		v.putWindow(t, []byte("user-1"), s, s.Add(time.Minute), i*10)
	}
	v.putWindow(t, []byte("user-2"), t0, t0.Add(time.Minute), 99)
	ts := start(t, b)
	from := t0.Add(90 * time.Second).Format(time.RFC3339)
	to := fmt.Sprint(t0.Add(4 * time.Minute).UnixMilli())
	var body struct {
		Key     string         `json:"key"`
		Windows []serve.Window `json:"windows"`
	}
	get(t, keyURL(ts.URL, "clicks", "user-1", "from="+from, "to="+to)).want(t, http.StatusOK).decode(t, &body)
	var got []string
	for _, w := range body.Windows {
		got = append(got, fmt.Sprintf("%s=%s", w.Start.Format("15:04"), w.Value))
	}
	if want := "00:01=10 00:02=20 00:03=30"; strings.Join(got, " ") != want {
		t.Fatalf("windows %v, want %s", got, want)
	}

	// Without from= and to=, a windowed key reads all its windows.
	get(t, keyURL(ts.URL, "clicks", "user-1")).want(t, http.StatusOK).decode(t, &body)
	if len(body.Windows) != 5 {
		t.Fatalf("all windows of user-1: %+v", body.Windows)
	}

	b.addView("plain", 2, false)
	p := get(t, keyURL(ts.URL, "plain", "k", "from=0")).want(t, http.StatusBadRequest).problem(t)
	if p.Type != "urn:tarn:problem:not-windowed" || !strings.Contains(p.Detail, "not windowed") {
		t.Fatalf("problem %+v", p)
	}
	p = get(t, ts.URL+"/v1/views/clicks?limit=100").want(t, http.StatusBadRequest).problem(t)
	if p.Type != "urn:tarn:problem:windowed" || !strings.Contains(p.Detail, "/keys/{key}") {
		t.Fatalf("scan of a windowed view: problem %+v", p)
	}
}

func TestRestoringIs503(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 1, false)
	v.apply(t, []byte("k"), 1)
	v.setOwner(0, serve.Owner{Local: true, Restoring: true})
	ts := start(t, b, func(c *serve.Config) { c.RetryAfter = 3 * time.Second })
	for _, u := range []string{keyURL(ts.URL, "v", "k"), ts.URL + "/v1/views/v"} {
		r := get(t, u).want(t, http.StatusServiceUnavailable)
		if r.Header.Get("Retry-After") != "3" || r.problem(t).Type != "urn:tarn:problem:restoring" {
			t.Fatalf("%s: Retry-After %q, body %s", u, r.Header.Get("Retry-After"), r.body)
		}
	}
}

// TestReadWaitsForAMove: a key read of a partition that restores here (it just moved in) or
// has no owner for a moment waits, up to MoveWait, and is answered once the partition
// settles, instead of a 503.
func TestReadWaitsForAMove(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 1, false)
	v.apply(t, []byte("k"), 1)
	ts := start(t, b, func(c *serve.Config) { c.MoveWait = 20 * time.Second })
	for _, between := range []serve.Owner{{Local: true, Restoring: true}, {}} {
		v.setOwner(0, between)
		done := make(chan response, 1)
		go func() { done <- get(t, keyURL(ts.URL, "v", "k")) }()
		time.Sleep(200 * time.Millisecond) // the read is waiting (a moment that is not timed)
		v.setOwner(0, serve.Owner{Local: true})
		(<-done).want(t, http.StatusOK)
	}
}

func TestReadYourWrites(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 2, false)
	first := v.apply(t, []byte("k"), 1)
	ts := start(t, b)

	// The record at the next offset is "written" but not yet applied: the read waits for it.
	want := fmt.Sprintf("min_offsets=%d:%d", first.Partition, first.Offset+1)
	done := make(chan response, 1)
	go func() { done <- get(t, keyURL(ts.URL, "v", "k", want, "wait=20s")) }()
	waitUntil(t, func() bool { return v.waiters() > 0 })
	v.apply(t, []byte("k"), 2)
	var body valueBody
	(<-done).want(t, http.StatusOK).decode(t, &body)
	if string(body.Value) != "2" {
		t.Fatalf("read %s, want the write it waited for", body.Value)
	}

	// A position never reached within wait= is a 503 that says so.
	r := get(t, keyURL(ts.URL, "v", "k", fmt.Sprintf("min_offsets=%d:99", first.Partition), "wait=50ms"))
	if p := r.want(t, http.StatusServiceUnavailable).problem(t); p.Type != "urn:tarn:problem:not-caught-up" {
		t.Fatalf("problem %+v", p)
	}
	r = get(t, keyURL(ts.URL, "v", "k", "min_lsn=FF/0", "wait=50ms")).want(t, http.StatusServiceUnavailable)
	if r.problem(t).Type != "urn:tarn:problem:not-caught-up" {
		t.Fatal(string(r.body))
	}
	if _, err := v.applyJSON([]byte("k"), []byte("3"), 0xFF00000000); err != nil {
		t.Fatal(err)
	}
	get(t, keyURL(ts.URL, "v", "k", "min_lsn=FF/0")).want(t, http.StatusOK).decode(t, &body)
	if body.Position.LSN.String() != "FF/0" || string(body.Value) != "3" {
		t.Fatalf("body %+v", body)
	}
}

// TestReadYourProducedRecord waits with min_offsets=topic:partition:offset, the form a
// producer's acknowledgement gives, on the fake's input topic "<view>-events".
func TestReadYourProducedRecord(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 2, false)
	first := v.apply(t, []byte("k"), 1)
	ts := start(t, b)

	want := fmt.Sprintf("min_offsets=v-events:%d:%d", first.Partition, first.Offset+1)
	done := make(chan response, 1)
	go func() { done <- get(t, keyURL(ts.URL, "v", "k", want, "wait=20s")) }()
	waitUntil(t, func() bool { return v.waiters() > 0 })
	v.apply(t, []byte("k"), 2)
	var body valueBody
	(<-done).want(t, http.StatusOK).decode(t, &body)
	if string(body.Value) != "2" {
		t.Fatalf("read %s, want the write it waited for", body.Value)
	}

	// Not reached in time: 503 with the position the view got to, as for min_lsn.
	r := get(t, keyURL(ts.URL, "v", "k", fmt.Sprintf("min_offsets=v-events:%d:99", first.Partition), "wait=50ms"))
	p := r.want(t, http.StatusServiceUnavailable).problem(t)
	if p.Type != "urn:tarn:problem:not-caught-up" || p.Position == nil || p.Position.Offsets[first.Partition] != first.Offset+2 ||
		r.Header.Get("Retry-After") == "" || r.Header.Get("Tarn-Position") != p.Position.Token() {
		t.Fatalf("problem %+v, headers %v", p, r.Header)
	}

	// A topic the view does not read is the client's mistake, named with the ones it reads.
	p = get(t, keyURL(ts.URL, "v", "k", "min_offsets=trades:0:1")).want(t, http.StatusBadRequest).problem(t)
	if p.Param != "min_offsets" || !strings.Contains(p.Detail, `"trades"`) || !strings.Contains(p.Detail, "v-events") {
		t.Fatalf("problem %+v", p)
	}
}

func TestIdenticalReadsCollapse(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 2, false)
	v.apply(t, []byte("k"), 1)
	s, err := serve.New(serve.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	var entered atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		s.ServeHTTP(w, r)
	}))
	defer ts.Close()
	gate := make(chan struct{})
	v.gate.Store(&gate)
	const n = 8
	var wg sync.WaitGroup
	results := make([]response, n)
	for i := range n {
		wg.Go(func() { results[i] = get(t, keyURL(ts.URL, "v", "k")) })
	}
	// The first read is held at the store while every request arrives; the others join it
	// rather than read again.
	waitUntil(t, func() bool { return v.gets.Load() >= 1 && entered.Load() == n })
	time.Sleep(50 * time.Millisecond) // from the server's entry to the read is a few microseconds
	v.gate.Store(nil)
	close(gate)
	wg.Wait()
	for _, r := range results {
		r.want(t, http.StatusOK)
		if string(r.body) != string(results[0].body) {
			t.Fatalf("bodies differ: %s / %s", r.body, results[0].body)
		}
	}
	if got := v.gets.Load(); got >= n {
		t.Fatalf("%d identical concurrent reads made %d store reads", n, got)
	}
	t.Logf("%d identical concurrent reads made %d store reads", n, v.gets.Load())
}

func TestAuth(t *testing.T) {
	b := newPebbleBackend(t)
	b.addView("v", 1, false)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := start(t, b, func(c *serve.Config) { c.TokenFile = file })
	r := get(t, ts.URL+"/v1/views").want(t, http.StatusUnauthorized)
	if r.Header.Get("WWW-Authenticate") == "" || r.problem(t).Type != "urn:tarn:problem:unauthorized" {
		t.Fatalf("401 %s", r.body)
	}
	do(t, http.MethodGet, ts.URL+"/v1/views", http.Header{"Authorization": {"Bearer wrong"}}).want(t, http.StatusUnauthorized)
	do(t, http.MethodGet, ts.URL+"/v1/views", http.Header{"Authorization": {"Bearer s3cret"}}).want(t, http.StatusOK)
	get(t, ts.URL+"/healthz").want(t, http.StatusOK)

	t.Setenv("TARN_TEST_TOKEN", "from-env")
	ts = start(t, b, func(c *serve.Config) { c.TokenEnv = "TARN_TEST_TOKEN" })
	do(t, http.MethodGet, ts.URL+"/v1/views", http.Header{"Authorization": {"Bearer from-env"}}).want(t, http.StatusOK)
}

func TestConfigValidate(t *testing.T) {
	_, err := serve.New(serve.Config{Token: "a", TokenFile: "b", TLSCertFile: "c", MaxLimit: -1, DefaultLimit: 5})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"Backend is required", "only one of Config.Token", "TLSCertFile and TLSKeyFile", "DefaultLimit"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	_, err = serve.New(serve.Config{Backend: newPebbleBackend(t), TokenEnv: "TARN_TEST_UNSET_TOKEN"})
	if err == nil || !strings.Contains(err.Error(), "TARN_TEST_UNSET_TOKEN") {
		t.Fatalf("unset token env: %v", err)
	}
}

func TestListViewsAndRebuild(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("b-view", 2, false)
	v.apply(t, []byte("k"), 1)
	b.addView("a-view", 3, true)
	rb := rebuildable{b.addView("rebuildable", 1, false)}
	ts := start(t, &rebuildBackend{pebbleBackend: b, rb: rb})
	var list struct{ Views []serve.ViewInfo }
	get(t, ts.URL+"/v1/views").want(t, http.StatusOK).decode(t, &list)
	if len(list.Views) != 3 || list.Views[0].Name != "a-view" || list.Views[1].Name != "b-view" {
		t.Fatalf("views %+v", list.Views)
	}
	if a := list.Views[0]; !a.Windowed || a.Partitions != 3 || len(a.Owned) != 3 || a.State != serve.StateRunning {
		t.Fatalf("a-view %+v", a)
	}
	if got := list.Views[1].Position.Offsets; got[v.Partition([]byte("k"))] != 1 {
		t.Fatalf("b-view position %v", got)
	}

	do(t, http.MethodPost, ts.URL+"/v1/views/b-view/rebuild", nil).want(t, http.StatusNotImplemented).problem(t)
	var res struct {
		View    string
		Version int
	}
	do(t, http.MethodPost, ts.URL+"/v1/views/rebuildable/rebuild", nil).want(t, http.StatusAccepted).decode(t, &res)
	if res.View != "rebuildable" || res.Version != 2 || rb.Info().State != serve.StateRebuilding {
		t.Fatalf("rebuild %+v, state %s", res, rb.Info().State)
	}
}

// rebuildBackend serves a pebbleBackend's views plus one that can be rebuilt.
type rebuildBackend struct {
	*pebbleBackend
	rb rebuildable
}

func (b *rebuildBackend) View(name string) (serve.View, error) {
	if name == "rebuildable" {
		return b.rb, nil
	}
	return b.pebbleBackend.View(name)
}

func TestReadyz(t *testing.T) {
	b := newPebbleBackend(t)
	b.ready = errors.New("partition 3 of orders is restoring")
	ts := start(t, b)
	r := get(t, ts.URL+"/readyz").want(t, http.StatusServiceUnavailable)
	if p := r.problem(t); !strings.Contains(p.Detail, "orders") || r.Header.Get("Retry-After") == "" {
		t.Fatalf("problem %+v", p)
	}
	b.mu.Lock()
	b.ready = nil
	b.mu.Unlock()
	get(t, ts.URL+"/readyz").want(t, http.StatusOK)
}

func TestMetrics(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 1, false)
	v.apply(t, []byte("k"), 1)
	reg := prometheus.NewRegistry()
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "tarn_dlq_records_total", Help: "from another package"})
	reg.MustRegister(other)
	ts := start(t, b, func(c *serve.Config) { c.Registerer = reg })
	get(t, keyURL(ts.URL, "v", "k")).want(t, http.StatusOK)
	get(t, keyURL(ts.URL, "v", "nope")).want(t, http.StatusNotFound)
	r := get(t, ts.URL+"/metrics").want(t, http.StatusOK)
	for _, want := range []string{
		`tarn_http_requests_total{code="200",method="GET",route="/v1/views/{view}/keys/{key}"} 1`,
		`tarn_http_requests_total{code="404",method="GET",route="/v1/views/{view}/keys/{key}"} 1`,
		`tarn_http_request_duration_seconds_bucket{method="GET",route="/v1/views/{view}/keys/{key}",le="+Inf"} 2`,
		"tarn_dlq_records_total 0",
		"tarn_http_watchers 0",
	} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestPanicsAndLimitsShowNothingInternal(t *testing.T) {
	b := newPebbleBackend(t)
	b.addView("v", 1, false)
	ts := start(t, &panicBackend{b}, func(c *serve.Config) { c.MaxBodyBytes = 10 })
	r := get(t, keyURL(ts.URL, "boom", "k")).want(t, http.StatusInternalServerError)
	if p := r.problem(t); p.Detail != "" || strings.Contains(string(r.body), "goroutine") || strings.Contains(string(r.body), "secret") {
		t.Fatalf("500 shows %s", r.body)
	}
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/views/v/rebuild", strings.NewReader(strings.Repeat("x", 100)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d for a big body", resp.StatusCode)
	}
}

// panicBackend panics when asked for the view "boom".
type panicBackend struct{ *pebbleBackend }

func (b *panicBackend) View(name string) (serve.View, error) {
	if name == "boom" {
		panic("secret internal state")
	}
	return b.pebbleBackend.View(name)
}

// waitUntil polls cond; the test's own deadline bounds it.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("gave up waiting")
		case <-time.After(5 * time.Millisecond):
		}
	}
}
