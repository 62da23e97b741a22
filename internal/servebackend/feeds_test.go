package servebackend

import (
	"strings"
	"testing"

	"github.com/tarnhq/tarn/views"
)

// TestFeeds: a failing CDC source marks the views that read its tables, and the ones that have
// not started (they wait for its topics), not the others.
func TestFeeds(t *testing.T) {
	b := &Backend{cdcTopics: map[string]bool{"shop.cdc.public.users": true}}
	for _, tt := range []struct {
		in   views.Info
		want bool
	}{
		{views.Info{Running: false}, true},
		{views.Info{Running: true, Lag: map[string]int64{"shop.cdc.public.users/0": 0}}, true},
		{views.Info{Running: true, Lag: map[string]int64{"trades/0": 3}}, false},
	} {
		if got := b.feeds(tt.in); got != tt.want {
			t.Errorf("feeds(%+v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestConfigValidate: every problem is reported at once.
func TestConfigValidate(t *testing.T) {
	err := Config{CDCSlot: "s"}.Validate()
	if err == nil {
		t.Fatal("no error for a config without a runtime, brokers or app")
	}
	for _, want := range []string{"Runtime", "Brokers", "App"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v does not name %s", err, want)
		}
	}
}
