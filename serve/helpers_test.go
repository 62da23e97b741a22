package serve_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/serve"
)

// start serves b over a real loopback listener.
func start(tb testing.TB, b serve.Backend, mutate ...func(*serve.Config)) *httptest.Server {
	tb.Helper()
	// Reads of a moving partition wait a moment here, not the default seconds, so that the
	// tests of 503 answers stay quick; TestReadWaitsForAMove waits longer on purpose.
	cfg := serve.Config{Backend: b, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MoveWait: 100 * time.Millisecond}
	for _, m := range mutate {
		m(&cfg)
	}
	s, err := serve.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ts := httptest.NewServer(s)
	tb.Cleanup(ts.Close)
	return ts
}

// response is a finished HTTP exchange.
type response struct {
	*http.Response
	body []byte
}

func do(tb testing.TB, method, u string, header http.Header) response {
	tb.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		tb.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return response{Response: resp, body: body}
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func get(tb testing.TB, u string) response { tb.Helper(); return do(tb, http.MethodGet, u, nil) }

// want checks the status, printing the body when it differs.
func (r response) want(tb testing.TB, status int) response {
	tb.Helper()
	if r.StatusCode != status {
		tb.Fatalf("%s %s: status %d, want %d; body: %s", r.Request.Method, r.Request.URL, r.StatusCode, status, r.body)
	}
	return r
}

func (r response) decode(tb testing.TB, into any) {
	tb.Helper()
	if err := json.Unmarshal(r.body, into); err != nil {
		tb.Fatalf("decoding %s: %v", r.body, err)
	}
}

func (r response) problem(tb testing.TB) serve.Problem {
	tb.Helper()
	if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
		tb.Fatalf("Content-Type %q, want application/problem+json; body %s", ct, r.body)
	}
	var p serve.Problem
	r.decode(tb, &p)
	if p.Status != r.StatusCode || !strings.HasPrefix(p.Type, "urn:tarn:problem:") || p.Title == "" {
		tb.Fatalf("problem %+v does not fit status %d", p, r.StatusCode)
	}
	return p
}

// valueBody is the body of a point read.
type valueBody struct {
	View     string          `json:"view"`
	Key      string          `json:"key"`
	KeyB64   string          `json:"key_b64"`
	Value    json.RawMessage `json:"value"`
	Position serve.Position  `json:"position"`
}

// pageBody is the body of a scan.
type pageBody struct {
	View    string `json:"view"`
	Version int    `json:"version"`
	Entries []struct {
		Key    string          `json:"key"`
		KeyB64 string          `json:"key_b64"`
		Value  json.RawMessage `json:"value"`
	} `json:"entries"`
	More       bool           `json:"more"`
	NextCursor string         `json:"next_cursor"`
	Position   serve.Position `json:"position"`
}

func keyURL(base, view, key string, q ...string) string {
	u := base + "/v1/views/" + url.PathEscape(view) + "/keys/" + url.PathEscape(key)
	if len(q) > 0 {
		u += "?" + strings.Join(q, "&")
	}
	return u
}

// keysIn returns n keys "<prefix>NNN" that fall in partition p of parts.
func keysIn(prefix string, p, parts int32, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		k := prefix + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if partition.For([]byte(k), parts) == p {
			out = append(out, k)
		}
	}
	return out
}
