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
	b *pebbleBackend
	v *pebbleView
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

func TestFakeConformance(t *testing.T) {
	b := newPebbleBackend(t)
	servetest.Conformance(t, fakeHarness{b: b, v: b.addView("conformance", 3, false)})
}
