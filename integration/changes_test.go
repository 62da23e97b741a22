package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/serve"
)

// changeFollower follows a view's /changes stream like an EventSource client: when a stream
// ends (an end event, or the connection breaks) it reconnects with Last-Event-ID through the
// instances still up, so the changes it collects must be every change once, whichever
// instance owned a partition when.
type changeFollower struct {
	t    *testing.T
	view string

	mu      sync.Mutex
	bases   []string // where to reconnect, in order of preference
	start   serve.Position
	lastID  string
	cursor  serve.Position
	seen    map[int32][]int64 // change offsets per partition, in the order received
	ends    []string          // the reasons streams ended with
	resumes int
}

func newChangeFollower(t *testing.T, view string, bases ...string) *changeFollower {
	return &changeFollower{t: t, view: view, bases: bases, seen: map[int32][]int64{}}
}

// use sets the instances to reconnect through from now on.
func (f *changeFollower) use(bases ...string) {
	f.mu.Lock()
	f.bases = bases
	f.mu.Unlock()
}

// run follows until ctx ends.
func (f *changeFollower) run(ctx context.Context) {
	for ctx.Err() == nil {
		f.mu.Lock()
		bases, lastID := f.bases, f.lastID
		f.mu.Unlock()
		for _, base := range bases {
			if ctx.Err() != nil {
				return
			}
			if f.follow(ctx, base, lastID) {
				break
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// follow reads one stream; false if it could not be opened.
func (f *changeFollower) follow(ctx context.Context, base, lastID string) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/views/"+f.view+"/changes", nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	f.mu.Lock()
	if lastID != "" {
		f.resumes++
	}
	f.mu.Unlock()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var id, name, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			f.event(id, name, data)
			id, name, data = "", "", ""
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "event: "):
			name = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		}
	}
	return true
}

func (f *changeFollower) event(id, name, data string) {
	pos, err := serve.ParsePosition(id)
	if err != nil {
		f.t.Errorf("event %s with an unreadable id %q: %v", name, id, err)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lastID == "" {
		f.start = pos
	}
	// Ids never go back: each is at or past the one before on every partition.
	if !pos.Reached(f.cursor) {
		f.t.Errorf("event %s's id %v is behind the one before, %v", name, pos.Offsets, f.cursor.Offsets)
	}
	switch name {
	case "change":
		var c struct {
			Partition int32
			Offset    int64
		}
		json.Unmarshal([]byte(data), &c)
		f.seen[c.Partition] = append(f.seen[c.Partition], c.Offset)
	case "end", "overflow":
		var e struct{ Reason string }
		json.Unmarshal([]byte(data), &e)
		f.ends = append(f.ends, name+":"+e.Reason)
	}
	f.lastID, f.cursor = id, pos
}

// reached reports whether the stream's position is at or past ends.
func (f *changeFollower) reached(ends map[int32]int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cursor.Reached(serve.Position{Offsets: ends})
}

// check compares what was received with the changelog: per partition, every data record
// from the first stream's position on, each once and in order.
func (f *changeFollower) check(ctx context.Context, brokers []string, changelog string, ends map[int32]int64) {
	t := f.t
	f.mu.Lock()
	defer f.mu.Unlock()
	want := map[int32][]int64{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(changelog),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	left := 0
	for _, end := range ends {
		if end > 0 {
			left++
		}
	}
	next := map[int32]int64{}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: %v", changelog, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Attrs.IsControl() || r.Offset < f.start.Offsets[r.Partition] || r.Offset >= ends[r.Partition] {
				// not a change, or before the first stream began, or after the end looked at
			} else {
				want[r.Partition] = append(want[r.Partition], r.Offset)
			}
			if next[r.Partition] < ends[r.Partition] && r.Offset+1 >= ends[r.Partition] {
				left--
			}
			next[r.Partition] = r.Offset + 1
		})
	}
	changes := 0
	for p, offs := range want {
		got := f.seen[p]
		// Beyond the ends looked at, more may have arrived: compare up to them.
		for len(got) > 0 && got[len(got)-1] >= ends[p] {
			got = got[:len(got)-1]
		}
		changes += len(offs)
		if fmt.Sprint(got) != fmt.Sprint(offs) {
			t.Errorf("partition %d: %d changes received, %d in the changelog from %d to %d; first difference at %s",
				p, len(got), len(offs), f.start.Offsets[p], ends[p], firstDifference(got, offs))
		}
	}
	t.Logf("live changes: %d from %s, each received once in order over %d resumes (streams ended: %v)",
		changes, changelog, f.resumes, f.ends)
}

func firstDifference(got, want []int64) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("#%d: got offset %d, want %d", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("#%d (one list ends)", min(len(got), len(want)))
}

// changelogEnds lists the end offsets of a changelog topic.
func changelogEnds(ctx context.Context, t *testing.T, brokers []string, name string) map[int32]int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, name)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	ends := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	return ends
}
