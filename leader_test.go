package tarn

import (
	"testing"
	"time"
)

func TestRetryDelay(t *testing.T) {
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
		5: 16 * time.Second, 6: 30 * time.Second, 7: 30 * time.Second, 1000: 30 * time.Second} {
		if got := retryDelay(attempt); got != want {
			t.Errorf("retryDelay(%d) = %s, want %s", attempt, got, want)
		}
	}
}

// TestCDCHealthQuiet: a program without a source has no CDC problem to report.
func TestCDCHealthQuiet(t *testing.T) {
	h := &cdcHealth{}
	h.set("cdc: down")
	if p := h.problem(); p != "" {
		t.Errorf("a program without a source has the problem %q", p)
	}
}
