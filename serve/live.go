package serve

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"
)

// item is what a watcher's buffer holds: a change, a position reached (from another
// instance's stream), or the end of another instance's stream.
type item struct {
	change   Change
	progress *Position
	from     string // the instance a progress came from
	end      error
}

// watcher is the bounded buffer between a view's apply path and one live stream. push never
// blocks: when the buffer is full the watcher is marked full, and every later push fails, so
// that no change after a dropped one is delivered and the stream's position stays exact.
type watcher struct {
	ch   chan item
	full chan struct{}
	once sync.Once
}

func newWatcher(n int) *watcher {
	return &watcher{ch: make(chan item, max(n, 1)), full: make(chan struct{})}
}

func (w *watcher) push(it item) bool {
	select {
	case <-w.full:
		return false
	default:
	}
	select {
	case w.ch <- it:
		return true
	default:
		w.once.Do(func() { close(w.full) })
		return false
	}
}

func (w *watcher) pushChange(c Change) bool { return w.push(item{change: c}) }

// ended is a SubscribeRequest.Ended: the backend's end of the subscription reaches the
// stream as an end event (or, if the buffer is full, as the overflow that follows).
func (w *watcher) ended(reason error) { w.push(item{end: reason}) }

// endReason names why a stream ended, for its end event.
func endReason(err error) string {
	switch {
	case errors.Is(err, ErrSwitched):
		return "version-switched"
	case errors.Is(err, ErrMoved):
		return "partition-moved"
	case errors.Is(err, ErrStopping):
		return "instance-stopping"
	case errors.Is(err, errPeerEnded):
		return "peer-ended"
	}
	return "ended"
}

// errPeerEnded ends a stream whose part from another instance ended.
var errPeerEnded = errors.New("serve: the stream from another instance ended")

// resumeFrom is where a live request resumes: Last-Event-ID (sent by EventSource clients on
// reconnect, so newer than the after= of the URL they reconnect to) or after=.
func resumeFrom(r *http.Request, p params) (Position, error) {
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		pos, err := ParsePosition(id)
		if err != nil {
			return Position{}, &paramError{param: "Last-Event-ID", err: err}
		}
		return pos, nil
	}
	return p.after, nil
}

// watchKey serves ?watch=sse on a key: its changes as server-sent events.
func (s *Server) watchKey(w http.ResponseWriter, r *http.Request, v View, key []byte, part int32, p params) {
	after, err := resumeFrom(r, p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	parts := []int32{part}
	wt := newWatcher(s.cfg.WatchBuffer)
	start, cancel, err := v.Subscribe(SubscribeRequest{Partitions: parts, HasKey: true, Key: key, After: after.Only(parts), Ended: wt.ended}, wt.pushChange)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer cancel()
	st := s.newStream(w, r, p.b64, start.Only(parts))
	st.run(wt, func() Position { return v.Position().Only(parts) })
}

// longPoll serves ?after= on a key: it answers as a point read as soon as the key changes
// after that position, or when wait= runs out (Tarn-Changed says which).
func (s *Server) longPoll(w http.ResponseWriter, r *http.Request, v View, key []byte, part int32, p params) {
	ctx, cancel := s.readContext(r, p)
	defer cancel()
	if err := s.awaitMin(ctx, v, p); err != nil {
		s.writeError(w, r, err)
		return
	}
	parts := []int32{part}
	wt := newWatcher(1)
	_, unsubscribe, err := v.Subscribe(SubscribeRequest{Partitions: parts, HasKey: true, Key: key, After: p.after.Only(parts)}, wt.pushChange)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	changed := false
	timer := time.NewTimer(s.waitOf(p))
	select {
	case <-wt.ch:
		changed = true
	case <-wt.full:
		changed = true
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()
	unsubscribe()
	if r.Context().Err() != nil {
		return
	}
	// A fresh read, not a shared one: one under way may predate the change.
	rd, err := v.Get(ctx, key)
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	if changed {
		w.Header().Set(changedHeader, "true")
	} else {
		w.Header().Set(changedHeader, "false")
	}
	s.writeRead(w, r, v, key, p, rd)
}

// changes serves GET /v1/views/{view}/changes: every change of the view as server-sent
// events, from the local partitions and, through their own streams, from other instances.
func (s *Server) changes(w http.ResponseWriter, r *http.Request) {
	p, err := parseParams(r.URL.RawQuery, changeParams, s.cfg.limits())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	after, err := resumeFrom(r, p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v := viewOf(r)
	local, remote, err := s.placement(r, v, p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	wt := newWatcher(s.cfg.WatchBuffer)
	cursor := Position{}
	if len(local) > 0 {
		start, cancel, err := v.Subscribe(SubscribeRequest{Partitions: local, After: after.Only(local), Ended: wt.ended}, wt.pushChange)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		defer cancel()
		cursor = start.Only(local)
	}
	ctx, stop := context.WithCancel(r.Context())
	defer stop()
	peerStart, peerLSNs, err := s.followPeers(ctx, r, remote, after, wt)
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	st := s.newStream(w, r, p.b64, cursor.Merge(peerStart))
	if len(remote) > 0 {
		// Each instance vouches for its own partitions' LSN only: the stream's is the
		// smallest (a source without one, or local partitions not yet in a progress event,
		// keep it at none).
		st.lsns = peerLSNs
		if len(local) > 0 {
			st.lsns[""] = cursor.LSN
		}
		st.cursor.LSN = minLSN(st.lsns)
	}
	st.run(wt, func() Position { return v.Position().Only(local) })
}

// stream writes server-sent events to one client and keeps the position it has reached: per
// partition, just past the last change sent, or a progress position, whichever is later.
type stream struct {
	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	rc     *http.ResponseController
	b64    bool
	cursor Position
	// lsns are, for a stream over several instances, the LSN of each ("" this one); nil
	// for a stream of this instance alone.
	lsns map[string]LSN
	err  error
}

func (s *Server) newStream(w http.ResponseWriter, r *http.Request, b64 bool, start Position) *stream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // keep reverse proxies from holding events back
	h.Set(positionHeader, start.Token())
	w.WriteHeader(http.StatusOK)
	if start.Offsets == nil {
		start.Offsets = map[int32]int64{}
	}
	return &stream{s: s, w: w, r: r, rc: http.NewResponseController(w), b64: b64, cursor: start}
}

// run sends the stream until the client leaves, the watcher overflows, or a peer's stream
// ends. localPos reads the position of the local partitions for progress events.
func (st *stream) run(wt *watcher, localPos func() Position) {
	st.s.metrics.watchers.Inc()
	defer st.s.metrics.watchers.Dec()
	// The first event gives the client a position to resume from before anything changes.
	st.progress(Position{})
	timer := time.NewTimer(st.s.cfg.ProgressInterval)
	defer timer.Stop()
	for st.err == nil {
		select {
		case <-st.r.Context().Done():
			return
		case it := <-wt.ch:
			st.handle(it)
		case <-wt.full:
			st.drain(wt)
			st.overflow()
			return
		case <-timer.C:
			// Read the position first, then send what is buffered: every change below it was
			// pushed before the position moved, so the progress event skips nothing.
			pos := localPos()
			st.drain(wt)
			select {
			case <-wt.full:
				st.overflow()
				return
			default:
			}
			st.progress(pos)
		}
		timer.Reset(st.s.cfg.ProgressInterval)
	}
}

func (st *stream) drain(wt *watcher) {
	for st.err == nil {
		select {
		case it := <-wt.ch:
			st.handle(it)
		default:
			return
		}
	}
}

func (st *stream) handle(it item) {
	switch {
	case it.end != nil:
		st.event("end", map[string]any{"position": st.cursor, "reason": endReason(it.end),
			"detail": "the stream ended (" + it.end.Error() + "); resume from this position"})
		st.err = it.end
	case it.progress != nil:
		st.progressFrom(it.from, *it.progress)
	default:
		st.change(it.change)
	}
}

// changeJSON is the data of a change event.
type changeJSON struct {
	Key       *string         `json:"key,omitempty"`
	KeyB64    *string         `json:"key_b64,omitempty"`
	Value     json.RawMessage `json:"value"`
	Deleted   bool            `json:"deleted,omitempty"`
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	LSN       string          `json:"lsn,omitempty"`
}

func (st *stream) change(c Change) {
	if next := c.Offset + 1; next > st.cursor.Offsets[c.Partition] {
		st.cursor.Offsets[c.Partition] = next
	}
	if st.lsns == nil {
		st.cursor.LSN = max(st.cursor.LSN, c.LSN)
	}
	k, isB64 := encodeKey(c.Key, st.b64)
	data := changeJSON{Value: c.Value, Deleted: c.Value == nil, Partition: c.Partition, Offset: c.Offset}
	if isB64 && !st.b64 {
		data.KeyB64 = &k
	} else {
		data.Key = &k
	}
	if c.LSN != 0 {
		data.LSN = c.LSN.String()
	}
	st.event("change", data)
}

func (st *stream) progress(pos Position) { st.progressFrom("", pos) }

// progressFrom moves the cursor to pos, a position that instance from (this one: "") reached.
func (st *stream) progressFrom(from string, pos Position) {
	st.cursor = st.cursor.Merge(pos)
	if l, ok := st.lsns[from]; ok {
		st.lsns[from] = max(l, pos.LSN)
		st.cursor.LSN = minLSN(st.lsns)
	}
	st.event("progress", map[string]any{"position": st.cursor})
}

// minLSN is the smallest of lsns.
func minLSN(lsns map[string]LSN) LSN {
	first := true
	var out LSN
	for _, l := range lsns {
		if first || l < out {
			out, first = l, false
		}
	}
	return out
}

func (st *stream) overflow() {
	st.s.metrics.overflows.Inc()
	st.event("overflow", map[string]any{"position": st.cursor,
		"detail": "this watcher fell too far behind; reconnect with Last-Event-ID or after= set to this position"})
}

// event writes one event whose id is the stream's position after it, and flushes it. A write
// that the client does not take within RequestTimeout ends the stream.
func (st *stream) event(name string, data any) {
	if st.err != nil {
		return
	}
	enc, err := json.Marshal(data)
	if err != nil {
		st.err = err
		return
	}
	b := make([]byte, 0, len(enc)+96)
	b = append(b, "id: "...)
	b = append(b, st.cursor.Token()...)
	b = append(b, "\nevent: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	b = append(b, enc...)
	b = append(b, "\n\n"...)
	_ = st.rc.SetWriteDeadline(time.Now().Add(st.s.cfg.RequestTimeout))
	if _, st.err = st.w.Write(b); st.err == nil {
		st.err = st.rc.Flush()
	}
}
