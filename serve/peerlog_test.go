package serve

import (
	"testing"
	"time"
)

// TestPeerLogOncePerInterval: a peer failing many times is logged once per interval, the line
// counting every failure since the last; another peer is logged on its own.
func TestPeerLogOncePerInterval(t *testing.T) {
	var l peerLog
	t0 := time.Unix(1000, 0)
	if log, n := l.failed("a", t0); !log || n != 1 {
		t.Fatalf("first failure: log=%t n=%d, want true 1", log, n)
	}
	for i := range 99 {
		if log, _ := l.failed("a", t0.Add(time.Duration(i)*time.Millisecond)); log {
			t.Fatalf("failure %d within the interval was logged", i+2)
		}
	}
	if log, n := l.failed("b", t0); !log || n != 1 {
		t.Fatalf("another peer: log=%t n=%d, want true 1", log, n)
	}
	if log, n := l.failed("a", t0.Add(peerLogEvery)); !log || n != 100 {
		t.Fatalf("after the interval: log=%t n=%d, want true 100", log, n)
	}
}
