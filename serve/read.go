package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
)

// Response headers.
const (
	// positionHeader carries the token of the position a response reflects.
	positionHeader = "Tarn-Position"
	// forwardedHeader marks a request one instance sent another, so it is never sent on.
	forwardedHeader = "Tarn-Forwarded"
	// changedHeader says whether a long-poll saw a change (true) or ran out of wait (false).
	changedHeader = "Tarn-Changed"
	// movingHeader marks a 503 that says the partition is not here (any more), so that the
	// instance that proxied the read looks for its new owner.
	movingHeader = "Tarn-Moving"
)

// key serves GET /v1/views/{view}/keys/{key}: a point read, the windows of a windowed view's
// key, a watch, or a long-poll.
func (s *Server) key(w http.ResponseWriter, r *http.Request) {
	p, err := parseParams(r.URL.RawQuery, keyParams, s.cfg.limits())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	key, err := pathKey(chi.URLParam(r, "key"), p.b64)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v := viewOf(r)
	if err := matchWindowed(v, &p); err != nil {
		s.writeError(w, r, err)
		return
	}
	part := v.Partition(key)
	if owner := s.settledOwner(r, v, part, ""); !owner.Local {
		s.route(w, r, part, owner.Addr)
		return
	} else if owner.Restoring {
		s.writeError(w, r, ErrRestoring)
		return
	}
	switch {
	case p.watch:
		s.watchKey(w, r, v, key, part, p)
	case p.hasAfter:
		s.longPoll(w, r, v, key, part, p)
	case p.windows:
		s.windows(w, r, v, key, p)
	default:
		s.get(w, r, v, key, p)
	}
}

// goneRetry is how long a read waits before it asks an owner that failed to answer again.
const goneRetry = 250 * time.Millisecond

// moveDeadlineKey carries a key read's deadline for waiting on a moving partition, so that a
// read retried after its owner went away waits no longer in all than Config.MoveWait.
type moveDeadlineKey struct{}

// settledOwner is the owner of partition part once it can answer: this instance with its
// stores restored, or another instance other than gone (an owner that just failed to
// answer; after goneRetry it may be asked again, as an instance restarted on the same
// address is the same owner back). Until then it waits, up to the request's MoveWait
// budget, and then returns the owner as it is (the caller answers 503).
func (s *Server) settledOwner(r *http.Request, v View, part int32, gone string) Owner {
	deadline, ok := r.Context().Value(moveDeadlineKey{}).(time.Time)
	if !ok {
		deadline = time.Now().Add(s.cfg.MoveWait)
	}
	began := time.Now()
	for {
		o := v.Owner(part)
		other := o.Addr != gone || time.Since(began) >= goneRetry
		settled := o.Local && !o.Restoring || !o.Local && o.Addr != "" && other
		if settled || !time.Now().Before(deadline) {
			return o
		}
		select {
		case <-r.Context().Done():
			return o
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// matchWindowed fits a key read to the kind of view: a windowed view's key without from= or
// to= reads all its windows; from= or to= on a view that is not windowed is the client's
// mistake, named as such.
func matchWindowed(v View, p *params) error {
	switch windowed := v.Info().Windowed; {
	case windowed && !p.windows:
		p.windows, p.from, p.to = true, minTime, maxTime
	case !windowed && p.windows:
		return ErrNotWindowed
	}
	return nil
}

// readContext bounds a request's work: its wait (for min_offsets/min_lsn or a long-poll) plus
// RequestTimeout.
func (s *Server) readContext(r *http.Request, p params) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(r.Context(), s.waitOf(p)+s.cfg.RequestTimeout, errTimeout)
}

func (s *Server) waitOf(p params) time.Duration {
	if p.hasWait {
		return p.wait
	}
	if p.hasMin || p.hasAfter {
		return s.cfg.DefaultWait
	}
	return 0
}

// awaitMin waits, up to the request's wait, until the view has reached min_offsets/min_lsn.
// Input topics are checked before anything waits, so that a topic the view does not read is
// the client's mistake at once rather than a wait that cannot end.
func (s *Server) awaitMin(ctx context.Context, v View, p params) error {
	if !p.hasMin {
		return nil
	}
	iw, err := inputWaiter(v, p.inputs)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeoutCause(ctx, s.waitOf(p), errNotCaughtUp)
	defer cancel()
	if iw != nil {
		err = iw.WaitInputs(wctx, p.inputs)
	}
	if err == nil {
		err = v.WaitFor(wctx, Position{Offsets: p.min.Offsets, LSN: p.min.LSN})
	}
	if err != nil {
		if cause := context.Cause(wctx); cause != nil && ctx.Err() == nil {
			return &notCaughtUpError{at: v.Position()}
		}
		return err
	}
	return nil
}

// inputWaiter is what waits for inputs on v, nil when there are none to wait for; a topic v
// does not read is a bad min_offsets.
func inputWaiter(v View, inputs InputOffsets) (InputWaiter, error) {
	if len(inputs) == 0 {
		return nil, nil
	}
	iw, _ := v.(InputWaiter)
	var known []string
	if iw != nil {
		known = iw.Inputs()
	}
	for _, t := range slices.Sorted(maps.Keys(inputs)) {
		if !slices.Contains(known, t) {
			return nil, badParam("min_offsets", "topic %q is not an input of the view; its input topics are %s", t, topicList(known))
		}
	}
	return iw, nil
}

func topicList(ts []string) string {
	if len(ts) == 0 {
		return "none"
	}
	return strings.Join(ts, ", ")
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, v View, key []byte, p params) {
	ctx, cancel := s.readContext(r, p)
	defer cancel()
	if err := s.awaitMin(ctx, v, p); err != nil {
		s.writeError(w, r, err)
		return
	}
	rd, err := s.readKey(ctx, r, v, key, p)
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	s.writeRead(w, r, v, key, p, rd)
}

// readKey reads one key, collapsing identical concurrent reads into one. A read that waited
// for min_offsets/min_lsn reads alone, since a read already under way may predate its
// position.
func (s *Server) readKey(ctx context.Context, r *http.Request, v View, key []byte, p params) (Read, error) {
	if p.hasMin {
		return v.Get(ctx, key)
	}
	sfKey := "k" + nameOf(r) + "\x00" + string(key)
	res, err, _ := s.reads.Do(sfKey, func() (any, error) {
		// Detached from the first caller's context so that its going away does not fail the
		// others; the read is bounded by RequestTimeout instead.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RequestTimeout)
		defer cancel()
		return v.Get(rctx, key)
	})
	if err != nil {
		return Read{}, err
	}
	return res.(Read), nil
}

// readFailed answers a failed read, sending it to the owner when ownership moved under it.
func (s *Server) readFailed(w http.ResponseWriter, r *http.Request, err error) {
	var notOwner *NotOwnerError
	if errors.As(err, &notOwner) {
		// The partition left this instance between the ownership check and the read, with
		// no new owner known yet: a handover under way, waited for like any other.
		if notOwner.Addr == "" && r.Header.Get(forwardedHeader) == "" {
			select {
			case <-r.Context().Done():
			case <-time.After(25 * time.Millisecond):
			}
			if s.rerouteMoved(w, r, notOwner.Partition, "") {
				return
			}
		}
		s.route(w, r, notOwner.Partition, notOwner.Addr)
		return
	}
	s.writeError(w, r, err)
}

// writeRead answers a point read: 200 with the value, 304 when If-None-Match holds the
// value's ETag, 404 when the key is absent; all with the position.
func (s *Server) writeRead(w http.ResponseWriter, r *http.Request, v View, key []byte, p params, rd Read) {
	if !rd.Found {
		w.Header().Set(positionHeader, rd.Position.Token())
		prob := problemOf("no-key", http.StatusNotFound, "the view has no value for this key")
		prob.Position = &rd.Position
		s.writeProblem(w, r, prob)
		return
	}
	b := make([]byte, 0, 64+len(key)+len(rd.Value))
	b = append(b, `{"view":`...)
	b = appendJSONString(b, nameOf(r))
	b = appendKey(b, key, p.b64)
	b = append(b, `,"value":`...)
	b = append(b, rd.Value...)
	b, tok := appendPosition(b, rd.Position)
	b = append(b, "}\n"...)
	w.Header().Set(positionHeader, tok)
	s.writeBody(w, r, b, etagOf(rd.Value))
}

func (s *Server) windows(w http.ResponseWriter, r *http.Request, v View, key []byte, p params) {
	ctx, cancel := s.readContext(r, p)
	defer cancel()
	if err := s.awaitMin(ctx, v, p); err != nil {
		s.writeError(w, r, err)
		return
	}
	wins, pos, err := v.Windows(ctx, key, p.from, p.to)
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	if wins == nil {
		wins = []Window{}
	}
	winJSON, err := json.Marshal(wins)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("serve: encoding windows: %w", err))
		return
	}
	b := append([]byte(`{"view":`), appendJSONString(nil, nameOf(r))...)
	b = appendKey(b, key, p.b64)
	b = append(b, `,"windows":`...)
	b = append(b, winJSON...)
	b, tok := appendPosition(b, pos)
	b = append(b, "}\n"...)
	w.Header().Set(positionHeader, tok)
	s.writeBody(w, r, b, etagOf(winJSON))
}

// writeBody sends a JSON body with its ETag, or 304 when the client has it already.
func (s *Server) writeBody(w http.ResponseWriter, r *http.Request, body []byte, etag string) {
	h := w.Header()
	h.Set("ETag", etag)
	h.Set("Cache-Control", "no-cache")
	if etagMatch(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// etagOf is a weak ETag of the data a body carries: the position in the body changes without
// the data changing, so bodies with equal ETags are equivalent, not identical.
func etagOf(parts ...[]byte) string {
	h := fnv.New64a()
	for _, p := range parts {
		var n [8]byte
		for i := range n {
			n[i] = byte(len(p) >> (8 * i))
		}
		_, _ = h.Write(n[:])
		_, _ = h.Write(p)
	}
	return `W/"` + strconv.FormatUint(h.Sum64(), 36) + `"`
}

// etagMatch applies If-None-Match's weak comparison.
func etagMatch(header, etag string) bool {
	if header == "" {
		return false
	}
	weak := func(t string) string {
		if len(t) > 2 && t[:2] == "W/" {
			return t[2:]
		}
		return t
	}
	for t := range strings.SplitSeq(header, ",") {
		if t = strings.TrimSpace(t); t == "*" || weak(t) == weak(etag) {
			return true
		}
	}
	return false
}

func appendJSONString(b []byte, s string) []byte {
	enc, _ := json.Marshal(s) // a string always encodes
	return append(b, enc...)
}

// appendKey appends `,"key":"…"`, or `,"key_b64":"…"` for a key that is not UTF-8 text.
func appendKey(b, key []byte, b64 bool) []byte {
	k, isB64 := encodeKey(key, b64)
	if isB64 && !b64 {
		b = append(b, `,"key_b64":`...)
	} else {
		b = append(b, `,"key":`...)
	}
	return appendJSONString(b, k)
}

// appendPosition appends `,"position":{…}` and returns the position's token as well.
func appendPosition(b []byte, pos Position) ([]byte, string) {
	return pos.appendJSON(append(b, `,"position":`...))
}

// listViews serves GET /v1/views.
func (s *Server) listViews(w http.ResponseWriter, r *http.Request) {
	if _, err := parseParams(r.URL.RawQuery, listParams, s.cfg.limits()); err != nil {
		s.writeError(w, r, err)
		return
	}
	views := s.cfg.Backend.Views()
	if views == nil {
		views = []ViewInfo{}
	}
	body, err := json.Marshal(struct {
		Views []ViewInfo `json:"views"`
	}{views})
	if err != nil {
		s.writeError(w, r, fmt.Errorf("serve: encoding views: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(body, '\n'))
}

// rebuild serves POST /v1/views/{view}/rebuild.
func (s *Server) rebuild(w http.ResponseWriter, r *http.Request) {
	if _, err := parseParams(r.URL.RawQuery, listParams, s.cfg.limits()); err != nil {
		s.writeError(w, r, err)
		return
	}
	v := viewOf(r)
	rb, ok := v.(Rebuilder)
	if !ok {
		s.writeProblem(w, r, problemOf("no-rebuild", http.StatusNotImplemented, "this view cannot be rebuilt here"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
	defer cancel()
	version, err := rb.Rebuild(ctx)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(struct {
		View    string `json:"view"`
		Version int    `json:"version"`
	}{nameOf(r), version})
}
