package tarn

import (
	"testing"
	"time"

	"github.com/tarnhq/tarn/views"
)

func TestRetryDelay(t *testing.T) {
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
		5: 16 * time.Second, 6: 30 * time.Second, 7: 30 * time.Second, 1000: 30 * time.Second} {
		if got := retryDelay(attempt); got != want {
			t.Errorf("retryDelay(%d) = %s, want %s", attempt, got, want)
		}
	}
}

// TestCDCHealthFeeds: a failing source marks the views that read its tables, and the ones
// that have not started (they wait for its topics), not the others.
func TestCDCHealthFeeds(t *testing.T) {
	h := newCDCHealth(nil, "shop", []string{"public.users"})
	for _, tt := range []struct {
		in   views.Info
		want bool
	}{
		{views.Info{Running: false}, true},
		{views.Info{Running: true, Lag: map[string]int64{"shop.cdc.public.users/0": 0}}, true},
		{views.Info{Running: true, Lag: map[string]int64{"trades/0": 3}}, false},
	} {
		if got := h.feeds(tt.in); got != tt.want {
			t.Errorf("feeds(%+v) = %v, want %v", tt.in, got, tt.want)
		}
	}
	if p := h.problem(); p != "" {
		t.Errorf("a program without a source has the problem %q", p)
	}
}
