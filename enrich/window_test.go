package enrich_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/tarnhq/tarn/enrich"
	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/views"
	"github.com/twmb/franz-go/pkg/kgo"
)

type impression struct {
	ID string `json:"id"`
	Ad string `json:"ad"`
}

type adClick struct {
	ID string `json:"id"`
	Ad string `json:"ad"`
}

type attributed struct {
	Impression *impression `json:"impression"`
	Click      *adClick    `json:"click"`
}

// label names an output by the ids of its two sides, "-" for a missing one.
func (a attributed) label() string {
	l, r := "-", "-"
	if a.Impression != nil {
		l = a.Impression.ID
	}
	if a.Click != nil {
		r = a.Click.ID
	}
	return l + "|" + r
}

// event is one input record of the join model.
type event struct {
	right bool // a click
	key   string
	t     int64 // ms
	id    string
}

// joinModel computes a windowed outer join the simple way, phase by phase, independently of
// enrich: inputs of one phase are produced together and may interleave in any order, so the
// test's phases are built such that no record's lateness depends on that order.
type joinModel struct {
	before, after, grace int64
	parts                int32
	st                   map[int32]int64
	buffered             map[int32][]*modelRecord
}

type modelRecord struct {
	event
	matched, emitted bool
}

func newJoinModel(before, after, grace time.Duration, parts int32) *joinModel {
	return &joinModel{before: before.Milliseconds(), after: after.Milliseconds(), grace: grace.Milliseconds(),
		parts: parts, st: map[int32]int64{}, buffered: map[int32][]*modelRecord{}}
}

// phase applies the events of one phase and returns the outputs it causes (by label) and the
// ids of the records that are late.
func (m *joinModel) phase(evs []event) (map[string]int, []string) {
	out := map[string]int{}
	var late []string
	byPart := map[int32][]event{}
	for _, e := range evs {
		p := partition.For([]byte(e.key), m.parts)
		byPart[p] = append(byPart[p], e)
	}
	for p, evs := range byPart {
		st, seen := m.st[p]
		var fresh []*modelRecord
		for _, e := range evs {
			reach := m.after
			if e.right {
				reach = m.before
			}
			if seen && e.t+reach+m.grace < st {
				late = append(late, e.id)
				continue
			}
			fresh = append(fresh, &modelRecord{event: e})
		}
		old := m.buffered[p]
		all := append(append([]*modelRecord(nil), old...), fresh...)
		for i, a := range all {
			for _, b := range all[i+1:] {
				if i < len(old) && slicesIndex(all, b) < len(old) {
					continue // both old: matched in an earlier phase
				}
				l, r := a, b
				if l.right == r.right || l.key != r.key {
					continue
				}
				if l.right {
					l, r = r, l
				}
				if r.t >= l.t-m.before && r.t <= l.t+m.after {
					l.matched, r.matched = true, true
					out[l.id+"|"+r.id]++
				}
			}
		}
		m.buffered[p] = all
		for _, r := range fresh {
			if !seen || r.t > st {
				st, seen = r.t, true
			}
		}
		m.st[p] = st
		for _, r := range all {
			if !r.matched && !r.emitted && r.t+m.before+m.after+m.grace < st {
				r.emitted = true
				if r.right {
					out["-|"+r.id]++
				} else {
					out[r.id+"|-"]++
				}
			}
		}
	}
	return out, late
}

func slicesIndex(all []*modelRecord, x *modelRecord) int {
	for i, y := range all {
		if y == x {
			return i
		}
	}
	return -1
}

func total(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// keyIn returns a key of partition p.
func keyIn(prefix string, p, parts int32) string {
	for i := 0; ; i++ {
		k := prefix + strconv.Itoa(i)
		if partition.For([]byte(k), parts) == p {
			return k
		}
	}
}

// Impressions joined with the clicks that follow them within 10 s, outer: matches, clicks
// out of order inside grace, records beyond grace to the dead-letter topic, unmatched
// impressions and clicks once their windows closed, and an instance restarted on empty local
// state in the middle. Expected outputs come from joinModel.
func TestImpressionsClicksWindowJoin(t *testing.T) {
	k := newKafkaEnv(t)
	const parts = 2
	imps, clicks := k.topic("impressions", parts), k.topic("clicks", parts)
	before, after, grace := time.Duration(0), 10*time.Second, 60*time.Second
	out := k.app + "-attributed"
	v, err := views.Define("attribution", func(b *views.Builder) {
		enrich.JoinWindows(b, "imp-clicks", enrich.WindowJoin[impression, adClick, attributed]{
			Left:   views.FromTopic(imps, views.JSON[impression]()),
			Right:  views.FromTopic(clicks, views.JSON[adClick]()),
			Before: before, After: after, Grace: grace, Mode: enrich.Outer,
			Join: func(_ string, i *impression, c *adClick) attributed { return attributed{Impression: i, Click: c} },
		}).To(out, views.JSON[attributed]())
	})
	must(t, err)
	model := newJoinModel(before, after, grace, parts)
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	rng := rand.New(rand.NewPCG(7, 11))
	n := 0
	mk := func(right bool, key string, at int64) event {
		n++
		prefix := "i"
		if right {
			prefix = "c"
		}
		return event{right: right, key: key, t: t0 + at, id: fmt.Sprintf("%s%d", prefix, n)}
	}
	produce := func(evs []event) {
		var recs []*kgo.Record
		for _, e := range evs {
			if e.right {
				recs = append(recs, jsonRecord(clicks, e.key, time.UnixMilli(e.t), adClick{ID: e.id, Ad: e.key}))
			} else {
				recs = append(recs, jsonRecord(imps, e.key, time.UnixMilli(e.t), impression{ID: e.id, Ad: e.key}))
			}
		}
		rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
		k.produce(recs...)
	}
	outputs, dead := k.reader(out), k.reader(k.app+".dlq")
	got, want := map[string]int{}, map[string]int{}
	var wantLate []string
	step := func(evs []event) {
		t.Helper()
		w, late := model.phase(evs)
		produce(evs)
		for _, r := range outputs.read(total(w)) {
			var a attributed
			must(t, json.Unmarshal(r.Value, &a))
			got[a.label()]++
		}
		maps.Copy(want, w)
		wantLate = append(wantLate, late...)
	}

	// Phase 1: impressions of 30 ads within 30 s, clicks 3 s after (matches), 15 s after
	// (too late for the window) or 2 s before (before the impression): all within grace of
	// each other, so their arrival order does not matter.
	var p1, p2 []event
	for i := range 30 {
		ad := "ad" + strconv.Itoa(i)
		at := int64(i) * 1000
		p1 = append(p1, mk(false, ad, at))
		switch i % 4 {
		case 0:
			p1 = append(p1, mk(true, ad, at+3000))
		case 1:
			p1 = append(p1, mk(true, ad, at+15000))
		case 2:
			p1 = append(p1, mk(true, ad, at-2000))
		}
		if i%3 == 0 {
			p2 = append(p2, mk(true, ad, at+9000)) // matches after the restart
		}
	}
	first := k.runtime(v)
	step(p1)
	first.stop(t)
	// Phase 2, on a new instance with empty local state: clicks that match impressions
	// restored from the changelogs.
	k.runtime(v)
	step(p2)
	// Phase 3: one impression per partition at +200 s moves stream time past every window so
	// far: the unmatched records come out.
	advance := func(at int64) []event {
		var evs []event
		for p := int32(0); p < parts; p++ {
			evs = append(evs, mk(false, keyIn(fmt.Sprintf("adv%d-", at), p, parts), at))
		}
		return evs
	}
	step(advance(200_000))
	// Phase 4, at stream time +200 s: an impression and its click inside grace, a pair
	// beyond grace (late, dead-lettered), a lone click inside grace.
	step([]event{
		mk(false, "late-ad", 100_000), mk(true, "late-ad", 120_000),
		mk(false, "ok-ad", 150_000), mk(true, "ok-ad", 155_000),
		mk(true, "lone-ad", 145_000),
	})
	// Phase 5: stream time +400 s closes the windows of phases 3 and 4.
	step(advance(400_000))

	if extra := outputs.quiet(time.Second); len(extra) > 0 {
		t.Errorf("%d outputs more than expected, first %s", len(extra), extra[0].Value)
	}
	if !maps.Equal(got, want) {
		t.Errorf("join outputs differ: %v", diff(got, want))
	}
	lates := map[string]bool{}
	for _, r := range dead.read(len(wantLate)) {
		h := headers(r)
		var e struct{ ID string }
		must(t, json.Unmarshal(r.Value, &e))
		lates[e.ID] = true
		if h["tarn.reason"] != "late" || h["tarn.step"] != "imp-clicks" {
			t.Errorf("dead letter %s has headers %v", e.ID, h)
		}
	}
	for _, id := range wantLate {
		if !lates[id] {
			t.Errorf("late record %s is not in the dead-letter topic (got %v)", id, lates)
		}
	}
	if total(want) < 40 || len(wantLate) != 2 {
		t.Fatalf("the test data exercise too little: %d outputs, %d late", total(want), len(wantLate))
	}
}
