package state_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tarnhq/tarn/state"
	"github.com/tarnhq/tarn/state/statetest"
)

func sec(n int) time.Time { return time.UnixMilli(int64(n) * 1000) }

func mustWindow(t testing.TB, db *state.DB, id state.ID, o state.WindowOptions) *state.Window {
	t.Helper()
	w, err := db.Window(id, o)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// fetch lists "key@seconds=value" for the windows of key (or of every key with all).
func fetch(t testing.TB, w *state.Window, r state.Reader, key string, all bool, from, to time.Time) []string {
	t.Helper()
	var it *state.WindowIter
	var err error
	if all {
		it, err = w.FetchAll(r, from, to)
	} else {
		it, err = w.Fetch(r, []byte(key), from, to)
	}
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for it.Next() {
		got = append(got, fmt.Sprintf("%q@%d=%s", it.Key(), it.Start().UnixMilli()/1000, it.Value()))
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestWindowFetchOrder(t *testing.T) {
	brokers := statetest.Kafka(t)
	db := statetest.Open(t)
	id := newID(t, "w", 0)
	ensure(t, brokers, id, 1)
	// Segments of 10 s; retention long enough that nothing expires here.
	w := mustWindow(t, db, id, state.WindowOptions{Size: 5 * time.Second, Retention: time.Hour, SegmentInterval: 10 * time.Second})
	txn := db.NewTxn()
	// Keys that are prefixes of each other or hold 0x00 must not mix; starts span negative
	// times and segments with gaps.
	keys := []string{"a", "ab", "a\x00", "", "b"}
	starts := []int{-5, 0, 5, 35, 40, 400, 1000}
	for _, s := range starts {
		for _, k := range keys {
			if err := w.Put(txn, []byte(k), sec(s), []byte(k+"!")); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := func(key string, from, to int) []string {
		var out []string
		for _, s := range starts {
			if s >= from && s <= to {
				out = append(out, fmt.Sprintf("%q@%d=%s!", key, s, key))
			}
		}
		return out
	}
	check := func(r state.Reader, what string) {
		for _, k := range keys {
			for _, span := range [][2]int{{-100, 2000}, {0, 40}, {1, 34}, {36, 999}, {400, 400}} {
				got := fetch(t, w, r, k, false, sec(span[0]), sec(span[1]))
				if fmt.Sprint(got) != fmt.Sprint(want(k, span[0], span[1])) {
					t.Errorf("%s: Fetch(%q, %v): got %v, want %v", what, k, span, got, want(k, span[0], span[1]))
				}
			}
		}
		all := fetch(t, w, r, "", true, sec(0), sec(40))
		if len(all) != 4*len(keys) {
			t.Errorf("%s: FetchAll [0,40] returned %d windows, want %d: %v", what, len(all), 4*len(keys), all)
		}
	}
	check(txn, "txn overlay")
	commit(t, txn, statetest.Client(t, brokers))
	check(db, "applied")
	if v, ok, err := w.Get(db, []byte("ab"), sec(35)); err != nil || !ok || string(v) != "ab!" {
		t.Fatalf("Get(ab, 35s) = %q %v %v", v, ok, err)
	}
}

// TestWindowRetention checks that windows expire at end+grace+retention of stream time, that
// expired segments are tombstoned in the changelog, and that a restore sees the same windows.
func TestWindowRetention(t *testing.T) {
	brokers := statetest.Kafka(t)
	db := statetest.Open(t)
	id := newID(t, "w", 0)
	ensure(t, brokers, id, 1)
	cl := statetest.Client(t, brokers)
	opts := state.WindowOptions{Size: 10 * time.Second, Grace: 5 * time.Second, Retention: 15 * time.Second, SegmentInterval: 10 * time.Second}
	w := mustWindow(t, db, id, opts)

	txn := db.NewTxn()
	for s := 0; s <= 90; s += 10 {
		if err := w.Put(txn, []byte("a"), sec(s), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	// Stream time 90 s: windows with start+30 s <= 90 s have expired.
	if err := w.Put(txn, []byte("a"), sec(50), []byte("late")); !errors.Is(err, state.ErrExpired) {
		t.Fatalf("Put into an expired window = %v, want ErrExpired", err)
	}
	live := []string{`"a"@70=v`, `"a"@80=v`, `"a"@90=v`}
	if got := fetch(t, w, txn, "a", false, sec(0), sec(100)); !slices.Equal(got, live) {
		t.Fatalf("txn Fetch = %v, want %v", got, live)
	}
	commit(t, txn, cl)
	if got := fetch(t, w, db, "", true, sec(-1000), sec(1000)); !slices.Equal(got, live) {
		t.Fatalf("FetchAll = %v, want %v", got, live)
	}
	// Segments 0..5 (starts 0..50 s) expired whole and were tombstoned; 60 s is in a
	// segment that is still partly live, so it stays (hidden from reads).
	wantLog := map[string]string{}
	for _, s := range []int{60, 70, 80, 90} {
		wantLog[string(windowKey("a", s))] = "v"
	}
	equalMaps(t, "changelog after first expiry", readChangelog(t, brokers, id.Topic(), 0), wantLog)

	restored := statetest.Open(t)
	rw := mustWindow(t, restored, id, opts)
	if _, err := restored.Restore(context.Background(), restoreCfg(brokers), rw); err != nil {
		t.Fatal(err)
	}
	if got := fetch(t, rw, restored, "", true, sec(-1000), sec(1000)); !slices.Equal(got, live) {
		t.Fatalf("restored FetchAll = %v, want %v", got, live)
	}

	txn = db.NewTxn()
	if err := w.Put(txn, []byte("b"), sec(200), []byte("v")); err != nil {
		t.Fatal(err)
	}
	commit(t, txn, cl)
	if got, want := fetch(t, w, db, "", true, sec(-1000), sec(1000)), []string{`"b"@200=v`}; !slices.Equal(got, want) {
		t.Fatalf("FetchAll after second expiry = %v, want %v", got, want)
	}
	equalMaps(t, "changelog after second expiry", readChangelog(t, brokers, id.Topic(), 0),
		map[string]string{string(windowKey("b", 200)): "v"})
	if st, ok, err := w.StreamTime(db); err != nil || !ok || !st.Equal(sec(200)) {
		t.Fatalf("StreamTime = %v %v %v, want 200 s", st, ok, err)
	}
}

// windowKey is the changelog key of a window: key then the start in ms, big-endian.
func windowKey(key string, s int) []byte {
	ms := uint64(s) * 1000
	b := []byte(key)
	for i := 7; i >= 0; i-- {
		b = append(b, byte(ms>>(8*i)))
	}
	return b
}
