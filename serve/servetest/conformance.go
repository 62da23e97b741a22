package servetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tarnhq/tarn/internal/partition"
	"github.com/tarnhq/tarn/serve"
)

// Harness is a backend under test and the way to change its data.
type Harness interface {
	// Backend is the backend under test. It serves one view, not windowed, named View, of at
	// least two partitions, all owned by this backend and running (Ready may take a moment).
	// The view holds what Write wrote: its value is the last value written for each key.
	Backend() serve.Backend
	// View names the view the suite reads.
	View() string
	// Write sets key to value (a JSON value; nil deletes the key) at the view's input. It may
	// return before the backend has applied it: the suite waits for that.
	Write(t testing.TB, key string, value json.RawMessage)
	// Stop makes the backend stop as its instance would: its live subscriptions must end
	// with serve.ErrStopping. The suite calls it last.
	Stop(t testing.TB)
}

// LSNWriter is implemented by a Harness whose view reads a Postgres table through CDC, so
// that a write has the LSN that min_lsn names. Without it the suite skips the LSN case: a
// view that reads no CDC table has no LSN to wait for.
type LSNWriter interface {
	// WriteLSN writes as Write does, in one Postgres transaction, and returns an LSN at or
	// after its commit.
	WriteLSN(t testing.TB, key string, value json.RawMessage) serve.LSN
}

// Timeout bounds every wait of the suite for the backend to apply a write.
const Timeout = 60 * time.Second

// Conformance checks that h's backend keeps serve's contract. Cases run in order on the one
// backend, each on keys of its own (a prefix per case), and Stop ends it.
func Conformance(t *testing.T, h Harness) {
	s := &suite{h: h}
	t.Run("Ready", s.ready)
	t.Run("UnknownView", s.unknownView)
	t.Run("Info", s.info)
	t.Run("PartitionAndOwner", s.partitionAndOwner)
	t.Run("PositionOfNothing", s.positionOfNothing)
	t.Run("GetFoundAndNotFound", s.get)
	t.Run("PositionsMoveForward", s.positionsForward)
	t.Run("ScanPages", s.scanPages)
	t.Run("ScanPinnedVersion", s.scanPinned)
	t.Run("NotWindowed", s.notWindowed)
	t.Run("WaitFor", s.waitFor)
	t.Run("WaitForLSN", s.waitForLSN)
	t.Run("SubscribeAfterPosition", s.subscribe)
	t.Run("SubscribeKey", s.subscribeKey)
	t.Run("SubscribeCancel", s.subscribeCancel)
	t.Run("SubscribeEndsWithReason", s.subscribeStop)
}

type suite struct {
	h Harness
}

// view returns the view under test.
func (s *suite) view(t testing.TB) serve.View {
	t.Helper()
	v, err := s.h.Backend().View(s.h.View())
	if err != nil {
		t.Fatalf("View(%q): %v", s.h.View(), err)
	}
	return v
}

// eventually retries check until it returns nil, failing t with its last error after Timeout.
func eventually(t testing.TB, check func() error) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sameJSON reports whether a and b hold the same JSON value (a backend may re-encode values).
func sameJSON(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// write writes key and waits until a Get sees value (nil: the key is gone); it returns that
// read.
func (s *suite) write(t testing.TB, key string, value json.RawMessage) serve.Read {
	t.Helper()
	s.h.Write(t, key, value)
	v := s.view(t)
	var rd serve.Read
	eventually(t, func() error {
		var err error
		rd, err = v.Get(context.Background(), []byte(key))
		switch {
		case err != nil:
			return fmt.Errorf("Get(%q): %w", key, err)
		case value == nil && rd.Found:
			return fmt.Errorf("Get(%q) still finds %s after its delete", key, rd.Value)
		case value != nil && (!rd.Found || !sameJSON(rd.Value, value)):
			return fmt.Errorf("Get(%q) = %v %s, want %s", key, rd.Found, rd.Value, value)
		}
		return nil
	})
	return rd
}

// keysIn returns n keys with prefix that the view puts in partition p.
func keysIn(v serve.View, prefix string, p int32, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("%s%04d", prefix, i)
		if v.Partition([]byte(k)) == p {
			out = append(out, k)
		}
	}
	return out
}

func num(i int) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)) }

func (s *suite) ready(t *testing.T) {
	eventually(t, func() error {
		if err := s.h.Backend().Ready(); err != nil {
			return fmt.Errorf("Ready: %w", err)
		}
		return nil
	})
}

func (s *suite) unknownView(t *testing.T) {
	_, err := s.h.Backend().View(s.h.View() + "-no-such-view")
	if !errors.Is(err, serve.ErrUnknownView) {
		t.Fatalf("View of an unknown name: %v, want serve.ErrUnknownView", err)
	}
	if _, err := s.h.Backend().View(s.h.View()); err != nil {
		t.Fatalf("View(%q): %v", s.h.View(), err)
	}
}

func (s *suite) info(t *testing.T) {
	infos := s.h.Backend().Views()
	names := make([]string, len(infos))
	for i, in := range infos {
		names[i] = in.Name
	}
	if !slices.IsSorted(names) || !slices.Contains(names, s.h.View()) {
		t.Fatalf("Views() = %v: want them in name order, with %q", names, s.h.View())
	}
	in := s.view(t).Info()
	if in.Name != s.h.View() || in.Windowed || in.Partitions < 2 {
		t.Fatalf("Info() = %+v: want %q, not windowed, at least 2 partitions", in, s.h.View())
	}
	if in.State != serve.StateRunning {
		t.Errorf("Info().State = %q on a ready backend, want %q", in.State, serve.StateRunning)
	}
	if len(in.Owned) != int(in.Partitions) || !slices.IsSorted(in.Owned) {
		t.Errorf("Info().Owned = %v: want all %d partitions, ascending", in.Owned, in.Partitions)
	}
}

func (s *suite) partitionAndOwner(t *testing.T) {
	v := s.view(t)
	n := v.Info().Partitions
	seen := map[int32]bool{}
	for i := range 200 {
		key := []byte(fmt.Sprintf("owner-%d", i))
		p := v.Partition(key)
		if want := partition.For(key, n); p != want {
			t.Fatalf("Partition(%q) = %d, want %d (partition.For over %d partitions)", key, p, want, n)
		}
		seen[p] = true
	}
	if len(seen) != int(n) {
		t.Errorf("200 keys fell in %d of %d partitions", len(seen), n)
	}
	for p := range n {
		if o := v.Owner(p); !o.Local || o.Restoring {
			t.Errorf("Owner(%d) = %+v on a ready backend that owns every partition, want local, not restoring", p, o)
		}
	}
}

// positionOfNothing runs before anything is written: every owned partition is at 0, and a
// wait for 0 ends at once (a partition left out of a position has reached nothing).
func (s *suite) positionOfNothing(t *testing.T) {
	v := s.view(t)
	pos := v.Position()
	zero := serve.Position{Offsets: map[int32]int64{}}
	for _, p := range v.Info().Owned {
		zero.Offsets[p] = 0
		if off, ok := pos.Offsets[p]; !ok || off != 0 {
			t.Errorf("Position() = %v before any write: want partition %d at 0", pos, p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := v.WaitFor(ctx, zero); err != nil {
		t.Errorf("WaitFor(%v) before any write: %v, want nil at once", zero, err)
	}
	key := "nothing-a"
	rd, err := v.Get(ctx, []byte(key))
	if p := v.Partition([]byte(key)); err != nil || rd.Found || !rd.Position.Reached(serve.Position{Offsets: map[int32]int64{p: 0}}) {
		t.Errorf("Get(%q) before any write = %+v, %v: want not found, at 0 on partition %d", key, rd, err, p)
	}
}

func (s *suite) get(t *testing.T) {
	v := s.view(t)
	key := "get-a"
	p := v.Partition([]byte(key))
	found := s.write(t, key, num(1))
	if off := found.Position.Offsets[p]; off <= 0 {
		t.Errorf("a read of %q found in partition %d has position %v: want that partition past 0", key, p, found.Position)
	}
	missing, err := v.Get(context.Background(), []byte(keysIn(v, "get-missing-", p, 1)[0]))
	if err != nil {
		t.Fatalf("Get of a missing key: %v, want no error", err)
	}
	if missing.Found || missing.Value != nil {
		t.Errorf("Get of a missing key = %+v, want not found and no value", missing)
	}
	if !missing.Position.Reached(found.Position.Only([]int32{p})) {
		t.Errorf("a later read of partition %d has position %v, below the earlier %v", p, missing.Position, found.Position)
	}
	gone := s.write(t, key, nil)
	if gone.Value != nil || !gone.Position.Reached(found.Position.Only([]int32{p})) ||
		gone.Position.Offsets[p] == found.Position.Offsets[p] {
		t.Errorf("the read after deleting %q = %+v: want no value, partition %d past %v", key, gone, p, found.Position)
	}
}

func (s *suite) positionsForward(t *testing.T) {
	v := s.view(t)
	before := v.Position()
	n := v.Info().Partitions
	if len(before.Offsets) != int(n) {
		t.Errorf("Position() = %v: want an offset for each of the %d owned partitions", before, n)
	}
	for p := range n {
		key := keysIn(v, "fwd-", p, 1)[0]
		rd := s.write(t, key, num(int(p)))
		after := v.Position()
		if !after.Reached(before) || after.Offsets[p] <= before.Offsets[p] {
			t.Errorf("partition %d: Position() went from %v to %v over a write: want it forward there", p, before, after)
		}
		if !after.Reached(rd.Position.Only([]int32{p})) {
			t.Errorf("Position() = %v after a read at %v: below it", after, rd.Position)
		}
		before = after
	}
}

// scanAll reads the range [prefix, prefix+"\xff") of parts in pages of limit at version,
// checking each page, and returns the entries and the version of the first page.
func scanAll(t *testing.T, v serve.View, parts []int32, prefix string, limit int) ([]serve.Entry, int) {
	t.Helper()
	req := serve.ScanRequest{Partitions: parts, Start: []byte(prefix), End: []byte(prefix + "\xff"), Limit: limit}
	var all []serve.Entry
	for page := 0; ; page++ {
		res, err := v.Scan(context.Background(), req)
		if err != nil {
			t.Fatalf("Scan page %d %+v: %v", page, req, err)
		}
		if len(res.Entries) > limit || (res.More && len(res.Entries) != limit) {
			t.Fatalf("Scan page %d: %d entries, more %v, for a limit of %d", page, len(res.Entries), res.More, limit)
		}
		for p := range res.Position.Offsets {
			if !slices.Contains(parts, p) {
				t.Errorf("Scan of partitions %v has position %v: partition %d was not read", parts, res.Position, p)
			}
		}
		if page == 0 {
			if res.Version <= 0 {
				t.Fatalf("Scan: version %d, want the version read (> 0)", res.Version)
			}
			req.Version = res.Version
		} else if res.Version != req.Version {
			t.Fatalf("Scan page %d pinned to version %d read version %d", page, req.Version, res.Version)
		}
		all = append(all, res.Entries...)
		if !res.More {
			return all, req.Version
		}
		last := res.Entries[len(res.Entries)-1].Key
		req.Start = append(bytes.Clone(last), 0)
	}
}

func (s *suite) scanPages(t *testing.T) {
	v := s.view(t)
	n := v.Info().Partitions
	want := map[string]json.RawMessage{}
	var keys []string
	for p := range n {
		for i, k := range keysIn(v, "scan-", p, 3) {
			keys = append(keys, k)
			want[k] = num(i)
		}
	}
	for _, k := range keys {
		s.write(t, k, want[k])
	}
	slices.Sort(keys)
	all := make([]int32, n)
	for p := range n {
		all[p] = p
	}
	for _, limit := range []int{1, 2, len(keys), len(keys) + 5} {
		got, _ := scanAll(t, v, all, "scan-", limit)
		checkEntries(t, fmt.Sprintf("limit %d", limit), got, keys, want)
	}
	one, _ := scanAll(t, v, []int32{1}, "scan-", 2)
	var inOne []string
	for _, k := range keys {
		if v.Partition([]byte(k)) == 1 {
			inOne = append(inOne, k)
		}
	}
	checkEntries(t, "partition 1", one, inOne, want)
}

func checkEntries(t *testing.T, what string, got []serve.Entry, keys []string, want map[string]json.RawMessage) {
	t.Helper()
	names := make([]string, len(got))
	for i, e := range got {
		names[i] = string(e.Key)
		if !sameJSON(e.Value, want[string(e.Key)]) {
			t.Errorf("%s: %s = %s, want %s", what, e.Key, e.Value, want[string(e.Key)])
		}
	}
	if !slices.Equal(names, keys) {
		t.Errorf("%s: scanned %v, want %v in key order", what, names, keys)
	}
}

func (s *suite) scanPinned(t *testing.T) {
	v := s.view(t)
	s.write(t, "pin-a", num(1))
	all := v.Info().Owned
	_, version := scanAll(t, v, all, "pin-", 10)
	if in := v.Info(); version != in.Version {
		t.Errorf("a scan of the serving version read version %d, Info says %d", version, in.Version)
	}
	_, err := v.Scan(context.Background(), serve.ScanRequest{Partitions: all, Limit: 10, Version: version + 1000})
	if !errors.Is(err, serve.ErrNoVersion) {
		t.Errorf("Scan of a version that does not exist: %v, want serve.ErrNoVersion", err)
	}
}

func (s *suite) notWindowed(t *testing.T) {
	_, _, err := s.view(t).Windows(context.Background(), []byte("w"), time.Unix(0, 0), time.Now())
	if !errors.Is(err, serve.ErrNotWindowed) {
		t.Errorf("Windows of a view that is not windowed: %v, want serve.ErrNotWindowed", err)
	}
}

func (s *suite) waitFor(t *testing.T) {
	v := s.view(t)
	cur := v.Position()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := v.WaitFor(ctx, cur); err != nil {
		t.Fatalf("WaitFor(the current position): %v", err)
	}
	// Ahead on a partition nobody writes: the wait ends with its context.
	ahead := serve.Position{Offsets: map[int32]int64{0: cur.Offsets[0] + 1}}
	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	if err := v.WaitFor(short, ahead); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFor(%v) from %v with a 200ms context: %v, want context.DeadlineExceeded", ahead, cur, err)
	}
	// A partition this backend does not have is not waited for.
	if err := v.WaitFor(ctx, serve.Position{Offsets: map[int32]int64{v.Info().Partitions + 7: 1}}); err != nil {
		t.Errorf("WaitFor on a partition the view does not own here: %v, want nil at once", err)
	}
	done := make(chan error, 1)
	go func() { done <- v.WaitFor(ctx, ahead) }()
	select {
	case err := <-done:
		t.Fatalf("WaitFor(%v) returned %v before anything was written", ahead, err)
	case <-time.After(50 * time.Millisecond):
	}
	key := keysIn(v, "wait-", 0, 1)[0]
	s.h.Write(t, key, num(1))
	if err := <-done; err != nil {
		t.Fatalf("WaitFor(%v) after a write to partition 0: %v", ahead, err)
	}
	if rd, err := v.Get(context.Background(), []byte(key)); err != nil || !rd.Found {
		t.Errorf("Get(%q) after WaitFor reached its write: %+v %v, want found", key, rd, err)
	}
}

// waitForLSN: a wait for a write's LSN returns once the view has applied that write, and
// the answers after it carry an LSN at or past it.
func (s *suite) waitForLSN(t *testing.T) {
	w, ok := s.h.(LSNWriter)
	if !ok {
		t.Skip("the harness's view reads no CDC table: its writes have no LSN")
	}
	v := s.view(t)
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	var last serve.LSN
	for i, key := range []string{"lsn-a", "lsn-b", "lsn-a"} {
		lsn := w.WriteLSN(t, key, num(i))
		if lsn <= last {
			t.Fatalf("write %d has LSN %s, not past the previous %s", i, lsn, last)
		}
		last = lsn
		if err := v.WaitFor(ctx, serve.Position{LSN: lsn}); err != nil {
			t.Fatalf("WaitFor(LSN %s) of write %d: %v", lsn, i, err)
		}
		rd, err := v.Get(ctx, []byte(key))
		if err != nil || !rd.Found || !sameJSON(rd.Value, num(i)) {
			t.Fatalf("Get(%q) right after WaitFor(LSN %s) = %+v, %v: want %s", key, lsn, rd, err, num(i))
		}
		if rd.Position.LSN < lsn {
			t.Errorf("Get(%q) after WaitFor(LSN %s) carries LSN %s, below it", key, lsn, rd.Position.LSN)
		}
		if pos := v.Position(); pos.LSN < lsn {
			t.Errorf("Position() after WaitFor(LSN %s) has LSN %s, below it", lsn, pos.LSN)
		}
	}
	short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelShort()
	ahead := serve.Position{LSN: last + 1<<40}
	if err := v.WaitFor(short, ahead); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitFor(LSN %s), far past every write, with a 300ms context: %v, want context.DeadlineExceeded", ahead.LSN, err)
	}
}

// recorder collects the changes a subscription hands over.
type recorder struct {
	mu      sync.Mutex
	changes []serve.Change
	ended   chan error
}

func newRecorder() *recorder { return &recorder{ended: make(chan error, 1)} }

func (r *recorder) fn(c serve.Change) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, c)
	return true
}

func (r *recorder) end(reason error) {
	select {
	case r.ended <- reason:
	default:
		panic("servetest: Ended called twice")
	}
}

func (r *recorder) got() []serve.Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.changes)
}

// waitChanges waits until r holds n changes of keys with prefix and returns them.
func (r *recorder) waitChanges(t testing.TB, prefix string, n int) []serve.Change {
	t.Helper()
	var got []serve.Change
	eventually(t, func() error {
		got = got[:0]
		for _, c := range r.got() {
			if bytes.HasPrefix(c.Key, []byte(prefix)) {
				got = append(got, c)
			}
		}
		if len(got) < n {
			return fmt.Errorf("subscription: %d changes of %s*, want %d", len(got), prefix, n)
		}
		return nil
	})
	return got
}

type change struct {
	key   string
	value json.RawMessage
}

// checkChanges checks got against want: per partition the same changes in the same order
// (a backend orders changes per partition only), with offsets rising strictly from start and
// below the view's position.
func checkChanges(t testing.TB, v serve.View, got []serve.Change, want []change, start serve.Position) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("subscription delivered %d changes, want %d: %v", len(got), len(want), got)
	}
	wantIn := map[int32][]change{}
	for _, w := range want {
		p := v.Partition([]byte(w.key))
		wantIn[p] = append(wantIn[p], w)
	}
	last := map[int32]int64{}
	for p, off := range start.Offsets {
		last[p] = off - 1
	}
	pos := v.Position()
	for _, c := range got {
		p := c.Partition
		if len(wantIn[p]) == 0 {
			t.Errorf("change %s=%s in partition %d, want none more there", c.Key, c.Value, p)
			continue
		}
		w := wantIn[p][0]
		wantIn[p] = wantIn[p][1:]
		if string(c.Key) != w.key || !sameJSON(c.Value, w.value) {
			t.Errorf("partition %d: change %s=%s, want %s=%s", p, c.Key, c.Value, w.key, w.value)
		}
		if prev, ok := last[p]; !ok || c.Offset <= prev {
			t.Errorf("change %s at offset %d of partition %d, want above %d (start %v)", c.Key, c.Offset, p, prev, start)
		}
		last[p] = c.Offset
		if pos.Offsets[p] <= c.Offset {
			t.Errorf("change %s at offset %d of partition %d delivered and applied, yet Position() = %v is not past it", c.Key, c.Offset, p, pos)
		}
	}
}

func (s *suite) subscribe(t *testing.T) {
	v := s.view(t)
	parts := v.Info().Owned
	rec := newRecorder()
	start, cancel, err := v.Subscribe(serve.SubscribeRequest{Partitions: parts, Ended: rec.end}, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	if !v.Position().Reached(start) || len(start.Offsets) != len(parts) {
		t.Errorf("Subscribe started at %v, want a position of all %v, at or below Position() = %v", start, parts, v.Position())
	}
	// One write at a time: a backend may hand over only the last change of a key per batch.
	want := []change{{"sub-a", num(1)}, {"sub-b", num(2)}, {"sub-a", nil}, {"sub-c", num(3)}}
	for _, w := range want {
		s.write(t, w.key, w.value)
	}
	got := rec.waitChanges(t, "sub-", len(want))
	checkChanges(t, v, got, want, start)

	// Resuming after the second change replays the ones that followed it in its partition,
	// and in the others those from the position after it; then it goes on live.
	after := serve.Position{Offsets: maps.Clone(start.Offsets)}
	for _, c := range got[:2] {
		after.Offsets[c.Partition] = c.Offset + 1
	}
	var again []change
	for _, c := range got[2:] {
		again = append(again, change{string(c.Key), c.Value})
	}
	replay := newRecorder()
	from, cancelReplay, err := v.Subscribe(serve.SubscribeRequest{Partitions: parts, After: after, Ended: replay.end}, replay.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer cancelReplay()
	if !from.Reached(after.Only(parts)) || !after.Only(parts).Reached(from) {
		t.Errorf("Subscribe after %v starts at %v, want the position asked for", after, from)
	}
	s.write(t, "sub-d", num(4))
	checkChanges(t, v, replay.waitChanges(t, "sub-", 3), append(again, change{"sub-d", num(4)}), after)
	select {
	case reason := <-rec.ended:
		t.Errorf("a subscription ended by itself: %v", reason)
	default:
	}
}

func (s *suite) subscribeKey(t *testing.T) {
	v := s.view(t)
	key := "subkey-a"
	rec := newRecorder()
	start, cancel, err := v.Subscribe(serve.SubscribeRequest{Partitions: v.Info().Owned, HasKey: true, Key: []byte(key), Ended: rec.end}, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	s.write(t, "subkey-b", num(1))
	s.write(t, key, num(2))
	s.write(t, keysIn(v, "subkey-c", v.Partition([]byte(key)), 1)[0], num(3))
	s.write(t, key, num(4))
	got := rec.waitChanges(t, "subkey-", 2)
	checkChanges(t, v, got, []change{{key, num(2)}, {key, num(4)}}, start)
}

func (s *suite) subscribeCancel(t *testing.T) {
	v := s.view(t)
	rec := newRecorder()
	_, cancel, err := v.Subscribe(serve.SubscribeRequest{Partitions: v.Info().Owned, Ended: rec.end}, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	s.write(t, "cancel-a", num(1))
	rec.waitChanges(t, "cancel-", 1)
	cancel()
	s.write(t, "cancel-b", num(2))
	// The write is applied; give a late delivery a moment to show.
	time.Sleep(100 * time.Millisecond)
	for _, c := range rec.got() {
		if string(c.Key) == "cancel-b" {
			t.Errorf("a change after cancel was delivered: %s=%s", c.Key, c.Value)
		}
	}
	select {
	case reason := <-rec.ended:
		t.Errorf("Ended(%v) called after cancel", reason)
	default:
	}
}

func (s *suite) subscribeStop(t *testing.T) {
	v := s.view(t)
	rec := newRecorder()
	start, cancel, err := v.Subscribe(serve.SubscribeRequest{Partitions: v.Info().Owned, Ended: rec.end}, rec.fn)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	s.write(t, "stop-a", num(1))
	checkChanges(t, v, rec.waitChanges(t, "stop-", 1), []change{{"stop-a", num(1)}}, start)
	s.h.Stop(t)
	select {
	case reason := <-rec.ended:
		if !errors.Is(reason, serve.ErrStopping) {
			t.Errorf("a subscription ended with %v when the backend stopped, want serve.ErrStopping", reason)
		}
	case <-time.After(Timeout):
		t.Fatal("a subscription did not end when the backend stopped")
	}
}
