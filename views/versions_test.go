package views

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	now := time.UnixMilli(1000)
	v1 := firstRecord("A", 1, now)
	rebuildingB, _ := startVersion(v1, "B", 1, now, time.Hour)
	failedB, _ := failVersion(rebuildingB, 2, "panic", now, time.Hour)
	switched, _ := switchTo(rebuildingB, 2, nil, now, time.Hour)
	rolled, _ := rollBack(switched, now, time.Hour)
	for _, tc := range []struct {
		name string
		rec  versionsRecord
		fp   string
		want plan
	}{
		{"same definition processes", v1, "A", plan{serving: 1, process: true}},
		{"changed definition starts a version", v1, "B", plan{serving: 1, start: true}},
		{"rebuilding binary freezes the old version", rebuildingB, "B", plan{serving: 1, rebuild: 2}},
		{"old binary keeps processing beside the rebuild", rebuildingB, "A", plan{serving: 1, process: true}},
		{"third definition supersedes the rebuild", rebuildingB, "C", plan{serving: 1, start: true}},
		{"failed rebuild is not retried by itself", failedB, "B", plan{serving: 1}},
		{"after the switch the new binary processes", switched, "B", plan{serving: 2, process: true}},
		{"after the switch the old binary is outdated", switched, "A", plan{outdated: true}},
		{"after a rollback the old binary processes", rolled, "A", plan{serving: 1, process: true}},
		{"after a rollback the new binary serves frozen", rolled, "B", plan{serving: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.rec, tc.fp); got != tc.want {
				t.Errorf("decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestVersionTransitions(t *testing.T) {
	now := time.UnixMilli(1000)
	later := now.Add(2 * time.Hour)
	rec := firstRecord("A", 1, now)
	rec, n := startVersion(rec, "B", 1, now, time.Hour)
	if n != 2 || rec.Latest != 2 || rec.Rebuild.State != StateRebuilding {
		t.Fatalf("start: version %d, record %+v", n, rec)
	}
	if _, err := switchTo(rec, 3, nil, now, time.Hour); !errors.Is(err, ErrNoRebuild) {
		t.Errorf("switch to a version that is not rebuilding: %v, want ErrNoRebuild", err)
	}
	// A superseding rebuild retires the running one and never reuses a number.
	sup, n := startVersion(rec, "C", 1, now, time.Hour)
	if n != 3 || sup.Old[0].Version != 2 || sup.Old[0].State != StateRetired {
		t.Errorf("supersede: version %d, old %+v", n, sup.Old)
	}
	// A declared version above the latest is honoured.
	if _, n := startVersion(rec, "C", 7, now, time.Hour); n != 7 {
		t.Errorf("declared version 7 gave %d", n)
	}
	sw, err := switchTo(rec, 2, &ShadowReport{Keys: 3, Differ: 1}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if sw.Serving.Version != 2 || sw.Rebuild != nil || sw.Old[0].Version != 1 || sw.Old[0].State != StateRetired ||
		sw.Serving.Shadow.Differ != 1 || !sw.Old[0].DeleteAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("switch: %+v", sw)
	}
	if sw.Old[0].due(now) || !sw.Old[0].due(later) {
		t.Errorf("retired version due: at once %v, after the delay %v", sw.Old[0].due(now), sw.Old[0].due(later))
	}
	back, err := rollBack(sw, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if back.Serving.Version != 1 || back.Rebuild.Version != 2 || back.Rebuild.State != StateRolledBack || len(back.Old) != 0 {
		t.Fatalf("rollback: %+v", back)
	}
	del, ok := markDeleted(sw, 1, later)
	if !ok || del.Old[0].State != StateDeleted {
		t.Fatalf("mark deleted: %v %+v", ok, del.Old)
	}
	if _, err := rollBack(del, later, time.Hour); !errors.Is(err, ErrNoRollback) {
		t.Errorf("rollback to a deleted version: %v, want ErrNoRollback", err)
	}
	if _, ok := markDeleted(del, 2, later); ok {
		t.Error("the serving version was marked deleted")
	}
	if _, ok := failVersion(sw, 2, "x", now, time.Hour); ok {
		t.Error("a serving version was marked failed")
	}
}

func TestVersionsRecordKeepsFewDeleted(t *testing.T) {
	now := time.UnixMilli(0)
	rec := firstRecord("fp0", 1, now)
	for i := range 20 {
		var n int
		rec, n = startVersion(rec, "fp"+string(rune('a'+i)), 1, now, 0)
		rec, _ = switchTo(rec, n, nil, now, 0)
		rec, _ = markDeleted(rec, n-1, now)
	}
	if len(rec.Old) != keepDeleted || rec.Serving.Version != 21 || rec.Latest != 21 {
		t.Errorf("after 20 rebuilds: serving %d, latest %d, %d old versions kept, want %d",
			rec.Serving.Version, rec.Latest, len(rec.Old), keepDeleted)
	}
}

func TestRebuildConfigValidate(t *testing.T) {
	cfg := Config{App: "a", Brokers: []string{"x"}, Views: nil, Rebuild: RebuildConfig{ShadowKeys: -2, SwitchLag: -1}}
	err := cfg.withDefaults().Validate()
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("Validate = %v", err)
	}
	for _, want := range []string{"ShadowKeys is -2", "SwitchLag"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error %q does not mention %q", err, want)
		}
	}
}

func TestThrottle(t *testing.T) {
	th := newThrottle(1e9)
	th.wait(context.Background(), 10) // within the burst: returns at once
	if th.tokens <= 0 {
		t.Errorf("tokens %f after a small batch", th.tokens)
	}
	var none *throttle
	none.wait(context.Background(), 1<<40) // nil means no limit
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow := newThrottle(1)
	slow.wait(ctx, 1<<20) // a cancelled context ends the wait
	if slow.tokens >= 0 {
		t.Errorf("tokens %f after exceeding the rate", slow.tokens)
	}
}

// Every transition of the versions ends a shadow check's hold, so that a hold never outlives
// the rebuild it was for.
func TestVersionTransitionsEndTheHold(t *testing.T) {
	now := time.UnixMilli(1000)
	rec, _ := startVersion(firstRecord("A", 1, now), "A", 1, now, time.Hour)
	rec.Hold = &shadowHold{Old: 1, New: 2, Cut: offsets{"in": {0: 5}}, Until: now.Add(time.Minute)}
	sw, err := switchTo(rec, 2, nil, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	failed, _ := failVersion(rec, 2, "x", now, time.Hour)
	superseded, _ := startVersion(rec, "B", 1, now, time.Hour)
	held := sw.clone()
	held.Hold = rec.Hold
	back, err := rollBack(held, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]versionsRecord{"switch": sw, "fail": failed, "supersede": superseded, "rollback": back} {
		if r.Hold != nil {
			t.Errorf("%s kept the hold %+v", name, r.Hold)
		}
	}
}
