package enrich

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

func TestCacheLRUAndTTL(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newCache[string](2, time.Minute, time.Second)
	c.put("a", "A", true, now)
	c.put("miss", "", false, now)
	if _, _, hit := c.get("a", now); !hit {
		t.Fatal("a is not cached")
	}
	// "miss" is now the least recently used: adding a third entry evicts it.
	if !c.put("b", "B", true, now) {
		t.Error("a third entry in a cache of 2 evicted nothing")
	}
	if _, _, hit := c.get("miss", now); hit {
		t.Error("the least recently used entry survived")
	}
	c.put("miss", "", false, now)
	row, found, hit := c.get("miss", now.Add(500*time.Millisecond))
	if !hit || found || row != "" {
		t.Errorf("negative entry within its TTL: row %q found %v hit %v", row, found, hit)
	}
	if _, _, hit := c.get("miss", now.Add(time.Second)); hit {
		t.Error("negative entry outlived its own TTL")
	}
	if _, _, hit := c.get("b", now.Add(59*time.Second)); !hit {
		t.Error("found row expired before its TTL")
	}
	if _, _, hit := c.get("b", now.Add(time.Minute)); hit {
		t.Error("found row outlived its TTL")
	}
	c.put("a", "A", true, now)
	if !c.evict("a") || c.evict("a") {
		t.Error("evict reports wrongly whether the key was cached")
	}
	c.put("x", "X", true, now)
	if n := c.clear(); n != 1 {
		t.Errorf("clear removed %d entries, want 1", n)
	}
}

// Open entries must sort by close time, negative times included, then side and time.
func TestOpenKeyOrder(t *testing.T) {
	keys := [][]byte{
		openKey(-5000, sideLeft, -9000, 0, "k"),
		openKey(-1, sideRight, -2, 3, "a"),
		openKey(0, sideLeft, 0, 0, "z"),
		openKey(0, sideRight, -4, 0, "a"),
		openKey(1<<40, sideLeft, 1<<39, 1, "key"),
	}
	if !slices.IsSortedFunc(keys, bytes.Compare) {
		t.Error("open keys are not in close-time order")
	}
	e, err := parseOpenKey(keys[4], []byte(`{}`))
	if err != nil || e.side != sideLeft || e.t != 1<<39 || e.key != "key" || !bytes.Equal(e.raw, keys[4]) {
		t.Errorf("parseOpenKey = %+v, %v", e, err)
	}
	if _, err := parseOpenKey([]byte("o1"), nil); err == nil {
		t.Error("a short open key parsed")
	}
}
