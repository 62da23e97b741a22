package serve_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tarnhq/tarn/serve"
)

// sseClient reads a server-sent event stream.
type sseClient struct {
	resp *http.Response
	br   *bufio.Reader
}

type event struct {
	id, name string
	data     []byte
}

type changeData struct {
	Key       string          `json:"key"`
	KeyB64    string          `json:"key_b64"`
	Value     json.RawMessage `json:"value"`
	Deleted   bool            `json:"deleted"`
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	LSN       string          `json:"lsn"`
}

func openSSE(t *testing.T, u string, header http.Header) *sseClient {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %s %s", u, resp.Status, body)
	}
	c := &sseClient{resp: resp, br: bufio.NewReader(resp.Body)}
	t.Cleanup(c.close)
	return c
}

func (c *sseClient) close() { c.resp.Body.Close() }

// next returns the next event, or false when the stream has ended.
func (c *sseClient) next(t *testing.T) (event, bool) {
	t.Helper()
	var ev event
	for {
		line, err := c.br.ReadString('\n')
		if errors.Is(err, io.EOF) {
			return ev, false
		}
		if err != nil {
			t.Fatal(err)
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if ev.name != "" {
				return ev, true
			}
			continue
		}
		field, value, _ := strings.Cut(line, ": ")
		switch field {
		case "id":
			ev.id = value
		case "event":
			ev.name = value
		case "data":
			ev.data = []byte(value)
		}
	}
}

// nextChange skips progress events and returns the next change, or the event that ended the
// stream (overflow, end) with false.
func (c *sseClient) nextChange(t *testing.T) (changeData, event, bool) {
	t.Helper()
	for {
		ev, ok := c.next(t)
		if !ok {
			t.Fatal("stream ended without an overflow or end event")
		}
		switch ev.name {
		case "progress":
			continue
		case "change":
			var d changeData
			if err := json.Unmarshal(ev.data, &d); err != nil {
				t.Fatal(err)
			}
			return d, ev, true
		default:
			return changeData{}, ev, false
		}
	}
}

func positionOf(t *testing.T, ev event) serve.Position {
	t.Helper()
	p, err := serve.ParsePosition(ev.id)
	if err != nil {
		t.Fatalf("event id %q: %v", ev.id, err)
	}
	return p
}

// fromStart is the position before anything was applied to a view of n partitions.
func fromStart(n int32) string {
	p := serve.Position{Offsets: map[int32]int64{}}
	for i := range n {
		p.Offsets[i] = 0
	}
	return p.Token()
}

func TestWatchKey(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 2, false)
	keys := keysIn("w", 1, 2, 2)
	key, other := keys[0], keys[1]
	ts := start(t, b, func(c *serve.Config) { c.ProgressInterval = 20 * time.Millisecond })
	c := openSSE(t, keyURL(ts.URL, "v", key, "watch=sse"), nil)
	first, _ := c.next(t)
	if first.name != "progress" || positionOf(t, first).Offsets[1] != 0 {
		t.Fatalf("first event %+v", first)
	}
	var applied []serve.Change
	for i := range 3 {
		v.apply(t, []byte(other), -i)
		applied = append(applied, v.apply(t, []byte(key), i))
	}
	for i, want := range applied {
		d, ev, ok := c.nextChange(t)
		if !ok || d.Key != key || string(d.Value) != fmt.Sprint(i) || d.Offset != want.Offset {
			t.Fatalf("change %d: %+v (%s)", i, d, ev.name)
		}
		if got := positionOf(t, ev).Offsets[1]; got != want.Offset+1 {
			t.Fatalf("event id position %d, want %d", got, want.Offset+1)
		}
	}
	// Idle: progress events report the partition's position, past the other key's change too.
	last := v.apply(t, []byte(other), "later")
	for {
		ev, _ := c.next(t)
		if ev.name == "change" {
			t.Fatalf("change of another key: %s", ev.data)
		}
		if ev.name == "progress" && positionOf(t, ev).Offsets[1] == last.Offset+1 {
			break
		}
	}
	del := v.apply(t, []byte(key), nil)
	d, _, _ := c.nextChange(t)
	if !d.Deleted || d.Offset != del.Offset || string(d.Value) != "null" {
		t.Fatalf("delete event %+v", d)
	}
}

func TestChangesReconnectLosesNothingAndRepeatsNothing(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 4, false)
	ts := start(t, b, func(c *serve.Config) { c.ProgressInterval = 10 * time.Millisecond })
	want := map[string]string{}
	apply := func(from, to int) {
		for i := from; i < to; i++ {
			k := fmt.Sprintf("k%d", i%7)
			v.apply(t, []byte(k), i)
			want[fmt.Sprintf("%s=%d", k, i)] = ""
		}
	}
	apply(0, 10)
	got := newChangeLog(t)
	c := openSSE(t, ts.URL+"/v1/views/v/changes?after="+fromStart(4), nil)
	var lastID string
	for range 6 {
		d, ev, ok := c.nextChange(t)
		if !ok {
			t.Fatalf("stream ended: %s", ev.name)
		}
		got.add(d)
		lastID = ev.id
	}
	c.close()
	apply(10, 25) // while disconnected
	c = openSSE(t, ts.URL+"/v1/views/v/changes?after="+fromStart(4), http.Header{"Last-Event-ID": {lastID}})
	for len(got.seen) < 25 {
		d, ev, ok := c.nextChange(t)
		if !ok {
			t.Fatalf("stream ended: %s", ev.name)
		}
		got.add(d)
	}
	apply(25, 30) // live after the replay
	for len(got.seen) < 30 {
		d, _, _ := c.nextChange(t)
		got.add(d)
	}
	got.check(t, want, v.Position())
	// Nothing more comes: the next progress event already covers everything.
	for {
		ev, _ := c.next(t)
		if ev.name == "change" {
			t.Fatalf("extra change %s", ev.data)
		}
		if positionOf(t, ev).Reached(v.Position()) {
			break
		}
	}
}

// changeLog collects changes and checks that each partition's offsets come once, in order.
type changeLog struct {
	t    *testing.T
	seen map[string]string
	next map[int32]int64
}

func newChangeLog(t *testing.T) *changeLog {
	return &changeLog{t: t, seen: map[string]string{}, next: map[int32]int64{}}
}

func (l *changeLog) add(d changeData) {
	l.t.Helper()
	if d.Offset != l.next[d.Partition] {
		l.t.Fatalf("partition %d: offset %d after %d (lost or repeated)", d.Partition, d.Offset, l.next[d.Partition]-1)
	}
	l.next[d.Partition]++
	l.seen[fmt.Sprintf("%s=%s", d.Key, d.Value)] = ""
}

func (l *changeLog) check(t *testing.T, want map[string]string, pos serve.Position) {
	t.Helper()
	if len(l.seen) != len(want) {
		t.Fatalf("saw %d changes, want %d", len(l.seen), len(want))
	}
	for k := range want {
		if _, ok := l.seen[k]; !ok {
			t.Fatalf("missing %s", k)
		}
	}
	for p, off := range pos.Offsets {
		if l.next[p] != off {
			t.Fatalf("partition %d: saw up to %d, position %d", p, l.next[p], off)
		}
	}
}

func TestOverflowEndsWithResumePosition(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 2, false)
	for i := range 30 {
		v.apply(t, fmt.Appendf(nil, "k%d", i), i)
	}
	ts := start(t, b, func(c *serve.Config) { c.WatchBuffer = 4 })
	got := newChangeLog(t)
	id := fromStart(2)
	rounds := 0
	for ; len(got.seen) < 30; rounds++ {
		// The replay overflows the buffer of 4 at once, so each round ends with an overflow.
		c := openSSE(t, ts.URL+"/v1/views/v/changes", http.Header{"Last-Event-ID": {id}})
		for len(got.seen) < 30 {
			d, ev, ok := c.nextChange(t)
			if !ok {
				if ev.name != "overflow" {
					t.Fatalf("stream ended with %s", ev.name)
				}
				id = ev.id
				if _, more := c.next(t); more {
					t.Fatal("events after overflow")
				}
				break
			}
			got.add(d)
		}
		c.close()
	}
	want := map[string]string{}
	for i := range 30 {
		want[fmt.Sprintf("k%d=%d", i, i)] = ""
	}
	got.check(t, want, v.Position())
	t.Logf("30 changes in %d rounds with a buffer of 4", rounds)
}

func TestSlowWatcherDoesNotSlowTheView(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 1, false)
	// The stalled write must outlast the applies below, however slow the machine.
	ts := start(t, b, func(c *serve.Config) { c.WatchBuffer = 16; c.RequestTimeout = 5 * time.Minute })
	c := openSSE(t, ts.URL+"/v1/views/v/changes", nil)
	startEv, _ := c.next(t)
	// The client reads nothing while more is applied than the connection can hold.
	big := strings.Repeat("x", 10<<10)
	const n = 3000
	began := time.Now()
	for i := range n {
		v.apply(t, fmt.Appendf(nil, "k%d", i), big)
	}
	t.Logf("applied %d changes of 10 KiB with a stalled watcher in %s", n, time.Since(began))
	got := newChangeLog(t)
	var end event
	for {
		d, ev, ok := c.nextChange(t)
		if !ok {
			end = ev
			break
		}
		got.add(d)
	}
	if end.name != "overflow" || positionOf(t, end).Offsets[0] != got.next[0] {
		t.Fatalf("ended with %s at %s after %d changes", end.name, end.id, got.next[0])
	}
	if got.next[0] >= n {
		t.Fatalf("all %d changes fit; the test did not stall the watcher", n)
	}
	// Resuming from the overflow position delivers the rest.
	c = openSSE(t, ts.URL+"/v1/views/v/changes", http.Header{"Last-Event-ID": {end.id}})
	for got.next[0] < n {
		d, ev, ok := c.nextChange(t)
		if !ok {
			c = openSSE(t, ts.URL+"/v1/views/v/changes", http.Header{"Last-Event-ID": {ev.id}})
			continue
		}
		got.add(d)
	}
	if positionOf(t, startEv).Offsets[0] != 0 {
		t.Fatalf("start %s", startEv.id)
	}
}

func TestLongPoll(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 2, false)
	v.apply(t, []byte("k"), 1)
	ts := start(t, b)
	r := get(t, keyURL(ts.URL, "v", "k")).want(t, http.StatusOK)
	pos := r.Header.Get("Tarn-Position")

	done := make(chan response, 1)
	go func() { done <- get(t, keyURL(ts.URL, "v", "k", "after="+pos, "wait=30s")) }()
	waitUntil(t, func() bool { return v.subscribers() > 0 })
	v.apply(t, []byte("k"), 2)
	r = (<-done).want(t, http.StatusOK)
	var body valueBody
	r.decode(t, &body)
	if r.Header.Get("Tarn-Changed") != "true" || string(body.Value) != "2" {
		t.Fatalf("changed %q, body %s", r.Header.Get("Tarn-Changed"), r.body)
	}

	// A change already made after the position answers at once.
	r = get(t, keyURL(ts.URL, "v", "k", "after="+pos, "wait=30s")).want(t, http.StatusOK)
	if r.Header.Get("Tarn-Changed") != "true" {
		t.Fatal("a past change did not answer the long-poll")
	}
	// Nothing changes within wait: the current value, unchanged, or 304 for a client that has it.
	now := r.Header.Get("Tarn-Position")
	r = get(t, keyURL(ts.URL, "v", "k", "after="+now, "wait=20ms")).want(t, http.StatusOK)
	if r.Header.Get("Tarn-Changed") != "false" || !bytes.Contains(r.body, []byte(`"value":2`)) {
		t.Fatalf("timeout: %q %s", r.Header.Get("Tarn-Changed"), r.body)
	}
	do(t, http.MethodGet, keyURL(ts.URL, "v", "k", "after="+now, "wait=20ms"), http.Header{"If-None-Match": {r.Header.Get("ETag")}}).
		want(t, http.StatusNotModified)
}

func TestResumeFromForgottenPositionIs410(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 1, false)
	for i := range 5 {
		v.apply(t, []byte("k"), i)
	}
	v.trim(0, 3)
	ts := start(t, b)
	r := get(t, ts.URL+"/v1/views/v/changes?after="+fromStart(1)).want(t, http.StatusGone)
	if r.problem(t).Type != "urn:tarn:problem:position-too-old" {
		t.Fatal(string(r.body))
	}
}

func TestChangesAcrossInstances(t *testing.T) {
	c := newCluster(t, func(cfg *serve.Config) { cfg.ProgressInterval = 10 * time.Millisecond })
	want := map[string]string{}
	apply := func(from, to int) {
		for i := from; i < to; i++ {
			k := fmt.Sprintf("k%d", i%11)
			c.apply(t, k, i)
			want[fmt.Sprintf("%s=%d", k, i)] = ""
		}
	}
	apply(0, 20)
	got := newChangeLog(t)
	s := openSSE(t, c.ta.URL+"/v1/views/v/changes?after="+fromStart(clusterParts), nil)
	var lastID string
	for range 12 {
		d, ev, ok := s.nextChange(t)
		if !ok {
			t.Fatalf("ended with %s", ev.name)
		}
		got.add(d)
		lastID = ev.id
	}
	s.close()
	apply(20, 40)
	// Resume through the other instance.
	s = openSSE(t, c.tb.URL+"/v1/views/v/changes", http.Header{"Last-Event-ID": {lastID}})
	for len(got.seen) < 40 {
		d, ev, ok := s.nextChange(t)
		if !ok {
			t.Fatalf("ended with %s", ev.name)
		}
		got.add(d)
	}
	got.check(t, want, c.a.Position().Merge(c.b.Position()))
	if len(positionOf(t, event{id: lastID}).Offsets) != clusterParts {
		t.Fatalf("event ids of a fanned-out stream cover %s", lastID)
	}
}

// TestLSNAcrossInstances: each instance vouches for its own partitions' LSN only, so a scan
// page and a changes stream over two instances carry the smaller of their LSNs.
func TestLSNAcrossInstances(t *testing.T) {
	c := newCluster(t, func(cfg *serve.Config) { cfg.ProgressInterval = 10 * time.Millisecond })
	for i := range 20 {
		k := []byte(fmt.Sprintf("k%d", i))
		lsn := serve.LSN(0x20)
		if c.owner(k) == c.a {
			lsn = 0x10
		}
		if _, err := c.owner(k).applyJSON(k, []byte("1"), lsn); err != nil {
			t.Fatal(err)
		}
	}
	if c.a.Position().LSN != 0x10 || c.b.Position().LSN != 0x20 {
		t.Fatalf("the instances are at %s and %s", c.a.Position().LSN, c.b.Position().LSN)
	}
	var page pageBody
	get(t, c.ta.URL+"/v1/views/v").want(t, http.StatusOK).decode(t, &page)
	if page.Position.LSN != 0x10 || len(page.Position.Offsets) != clusterParts {
		t.Fatalf("scan page position %+v, want LSN 0/10 over every partition", page.Position)
	}
	s := openSSE(t, c.ta.URL+"/v1/views/v/changes", nil)
	defer s.close()
	for range 20 {
		ev, ok := s.next(t)
		if !ok {
			t.Fatalf("ended with %s", ev.name)
		}
		if got := positionOf(t, ev).LSN; got != 0x10 {
			t.Fatalf("%s event at LSN %s, want the smaller, 0/10", ev.name, got)
		}
	}
}
