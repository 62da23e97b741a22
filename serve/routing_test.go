package serve_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/serve"
)

// cluster is two instances of one view of 4 partitions: a owns 0 and 1, b owns 2 and 3.
type cluster struct {
	a, b   *pebbleView
	ta, tb *httptest.Server
}

const clusterParts = 4

func newCluster(t *testing.T, mutate ...func(*serve.Config)) *cluster {
	t.Helper()
	ba, bb := newPebbleBackend(t), newPebbleBackend(t)
	c := &cluster{a: ba.addView("v", clusterParts, false), b: bb.addView("v", clusterParts, false)}
	c.ta, c.tb = start(t, ba, mutate...), start(t, bb, mutate...)
	for p := range int32(clusterParts) {
		if p < 2 {
			c.b.setOwner(p, serve.Owner{Addr: c.ta.URL})
		} else {
			c.a.setOwner(p, serve.Owner{Addr: c.tb.URL})
		}
	}
	return c
}

// owner is the view of the instance that owns key.
func (c *cluster) owner(key []byte) *pebbleView {
	if partition.For(key, clusterParts) < 2 {
		return c.a
	}
	return c.b
}

func (c *cluster) apply(t *testing.T, key string, value any) serve.Change {
	return c.owner([]byte(key)).apply(t, []byte(key), value)
}

func TestTwoInstancesAnswerForEachOther(t *testing.T) {
	c := newCluster(t)
	var keys []string
	for i := range 40 {
		k := fmt.Sprintf("k%02d", i)
		c.apply(t, k, i)
		keys = append(keys, k)
	}
	for _, ts := range []*httptest.Server{c.ta, c.tb} {
		for i, k := range keys {
			var body valueBody
			get(t, keyURL(ts.URL, "v", k)).want(t, http.StatusOK).decode(t, &body)
			if string(body.Value) != fmt.Sprint(i) {
				t.Fatalf("%s via %s: %s", k, ts.URL, body.Value)
			}
		}
		get(t, keyURL(ts.URL, "v", "absent-b")).want(t, http.StatusNotFound).problem(t)
		got := scanAll(t, ts.URL+"/v1/views/v?limit=7")
		if !slices.Equal(got, keys) {
			t.Fatalf("scan via %s: %v", ts.URL, got)
		}
		var page pageBody
		get(t, ts.URL+"/v1/views/v?limit=1000").want(t, http.StatusOK).decode(t, &page)
		if len(page.Position.Offsets) != clusterParts {
			t.Fatalf("a fanned-out page's position covers %v, want all %d partitions", page.Position.Offsets, clusterParts)
		}
	}
}

func TestRedirectToOwner(t *testing.T) {
	c := newCluster(t, func(cfg *serve.Config) { cfg.Redirect = true })
	key := keysIn("r", 3, clusterParts, 1)[0]
	c.apply(t, key, "x")
	r := get(t, keyURL(c.ta.URL, "v", key, "wait=1s")).want(t, http.StatusTemporaryRedirect)
	if loc := r.Header.Get("Location"); loc != keyURL(c.tb.URL, "v", key, "wait=1s") {
		t.Fatalf("Location %q", loc)
	}
}

func TestForwardedRequestsAreNotSentOn(t *testing.T) {
	c := newCluster(t)
	key := keysIn("f", 3, clusterParts, 1)[0]
	r := do(t, http.MethodGet, keyURL(c.ta.URL, "v", key), http.Header{"Tarn-Forwarded": {"1"}}).want(t, http.StatusServiceUnavailable)
	if p := r.problem(t); p.Type != "urn:tarn:problem:moving" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("problem %+v", p)
	}
	do(t, http.MethodGet, c.ta.URL+"/v1/views/v", http.Header{"Tarn-Forwarded": {"1"}}).want(t, http.StatusServiceUnavailable)
	// A partition nobody owns yet.
	c.a.setOwner(3, serve.Owner{})
	get(t, keyURL(c.ta.URL, "v", key)).want(t, http.StatusServiceUnavailable).problem(t)
}

func TestOwnerRestoringGives503ThroughEitherInstance(t *testing.T) {
	c := newCluster(t)
	key := keysIn("s", 2, clusterParts, 1)[0]
	c.apply(t, key, "x")
	c.b.setOwner(2, serve.Owner{Local: true, Restoring: true})
	for _, u := range []string{keyURL(c.ta.URL, "v", key), c.ta.URL + "/v1/views/v", keyURL(c.tb.URL, "v", key)} {
		r := get(t, u).want(t, http.StatusServiceUnavailable)
		if r.problem(t).Type != "urn:tarn:problem:restoring" || r.Header.Get("Retry-After") == "" {
			t.Fatalf("%s: %s (Retry-After %q)", u, r.body, r.Header.Get("Retry-After"))
		}
	}
}

func TestUnreachableOwner(t *testing.T) {
	c := newCluster(t)
	key := keysIn("u", 3, clusterParts, 1)[0]
	c.tb.Close()
	for _, u := range []string{keyURL(c.ta.URL, "v", key), c.ta.URL + "/v1/views/v"} {
		r := get(t, u).want(t, http.StatusBadGateway)
		if p := r.problem(t); p.Type != "urn:tarn:problem:owner-unreachable" || strings.Contains(p.Detail, "127.0.0.1") {
			t.Fatalf("%s: %+v", u, p)
		}
	}
}

func TestWatchThroughOtherInstance(t *testing.T) {
	c := newCluster(t)
	key := keysIn("w", 3, clusterParts, 1)[0]
	s := openSSE(t, keyURL(c.ta.URL, "v", key, "watch=sse"), nil)
	if ev, _ := s.next(t); ev.name != "progress" {
		t.Fatalf("first event %s", ev.name)
	}
	want := c.apply(t, key, "through a")
	d, _, ok := s.nextChange(t)
	if !ok || d.Key != key || d.Offset != want.Offset || string(d.Value) != `"through a"` {
		t.Fatalf("change %+v", d)
	}
}
