package serve_test

import (
	"encoding/json"
	"testing"

	"github.com/tarnhq/tarn/serve"
	"github.com/tarnhq/tarn/serve/servetest"
)

// fakeHarness runs the conformance suite against the Pebble-backed fake the other tests of
// serve use, so that they test serve against a backend that keeps the contract.
type fakeHarness struct {
	b   *pebbleBackend
	v   *pebbleView
	lsn *serve.LSN // the last LSN WriteLSN handed out
}

func (h fakeHarness) Backend() serve.Backend { return h.b }
func (h fakeHarness) View() string           { return h.v.name }
func (h fakeHarness) Stop(testing.TB)        { h.v.stop() }

func (h fakeHarness) Write(t testing.TB, key string, value json.RawMessage) {
	t.Helper()
	if _, err := h.v.applyJSON([]byte(key), value, 0); err != nil {
		t.Fatal(err)
	}
}

// WriteLSN gives each write the next LSN, as commits in Postgres have rising LSNs.
func (h fakeHarness) WriteLSN(t testing.TB, key string, value json.RawMessage) serve.LSN {
	t.Helper()
	*h.lsn += 0x100
	if _, err := h.v.applyJSON([]byte(key), value, *h.lsn); err != nil {
		t.Fatal(err)
	}
	return *h.lsn
}

func TestFakeConformance(t *testing.T) {
	b := newPebbleBackend(t)
	servetest.Conformance(t, fakeHarness{b: b, v: b.addView("conformance", 3, false), lsn: new(serve.LSN)})
}
