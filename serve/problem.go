package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
)

// Problem is an RFC 9457 problem details body (application/problem+json), the body of every
// error response.
type Problem struct {
	// Type is "urn:tarn:problem:<slug>"; the slugs are listed in openapi.yaml.
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Instance is the request path.
	Instance string `json:"instance,omitempty"`
	// Param names the query or path parameter that was wrong (an extension member).
	Param string `json:"param,omitempty"`
	// Position is the view's position, on a 404 for a key and on a 503 not-caught-up (an
	// extension member).
	Position *Position `json:"position,omitempty"`
}

const problemPrefix = "urn:tarn:problem:"

// paramError is a bad request parameter; it becomes a 400 that names the parameter.
type paramError struct {
	param string
	err   error
}

func (e *paramError) Error() string { return fmt.Sprintf("parameter %s: %v", e.param, e.err) }
func (e *paramError) Unwrap() error { return e.err }

func badParam(param string, format string, args ...any) error {
	return &paramError{param: param, err: fmt.Errorf(format, args...)}
}

// peerError is a problem answered by another instance, passed on as it came.
type peerError struct {
	addr    string
	problem Problem
	retry   string
}

func (e *peerError) Error() string {
	return fmt.Sprintf("serve: instance %s answered %d: %s", e.addr, e.problem.Status, e.problem.Detail)
}

// errNotCaughtUp reports that a view did not reach a min_offsets/min_lsn position in time.
var errNotCaughtUp = errors.New("serve: view has not reached the requested position")

// notCaughtUpError is errNotCaughtUp with the position the view had got to, which the 503
// carries so that a client sees how far behind it is.
type notCaughtUpError struct{ at Position }

func (e *notCaughtUpError) Error() string { return errNotCaughtUp.Error() }
func (e *notCaughtUpError) Unwrap() error { return errNotCaughtUp }

// errVersionChanged reports that the view switched to a rebuilt version while a scan was paging
// through it.
var errVersionChanged = errors.New("serve: the view's version changed during the scan")

// errTimeout reports that a request ran out of its RequestTimeout.
var errTimeout = errors.New("serve: request timed out")

// writeProblem sends p, with Retry-After on 503s.
func (s *Server) writeProblem(w http.ResponseWriter, r *http.Request, p Problem) {
	p.Instance = r.URL.Path
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if p.Status == http.StatusServiceUnavailable && h.Get("Retry-After") == "" {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(s.cfg.RetryAfter.Seconds()))))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func problemOf(slug string, status int, detail string) Problem {
	return Problem{Type: problemPrefix + slug, Status: status, Detail: detail}
}

// writeError maps err to a problem. Errors the client cannot act on are logged and answered
// with a bare 500, so that no internal detail leaks.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var pe *paramError
	var peer *peerError
	var notOwner *NotOwnerError
	switch {
	case errors.As(err, &pe):
		p := problemOf("bad-parameter", http.StatusBadRequest, pe.Error())
		p.Param = pe.param
		s.writeProblem(w, r, p)
	case errors.As(err, &peer):
		if peer.retry != "" {
			w.Header().Set("Retry-After", peer.retry)
		}
		s.writeProblem(w, r, peer.problem)
	case errors.Is(err, ErrUnknownView):
		s.writeProblem(w, r, problemOf("unknown-view", http.StatusNotFound, "no view has that name; GET /v1/views lists them"))
	case errors.Is(err, ErrNotCDC):
		p := problemOf("bad-parameter", http.StatusBadRequest,
			"parameter min_lsn: the view reads no Postgres table as an input (a co-table does not count), so no LSN says what it applied; "+
				"after a Kafka write use min_offsets=topic:partition:offset with the record's position")
		p.Param = "min_lsn"
		s.writeProblem(w, r, p)
	case errors.Is(err, ErrNotWindowed):
		p := problemOf("not-windowed", http.StatusBadRequest,
			"the view is not windowed: from= and to= apply only to windowed views; read the key without them")
		p.Param = "from"
		s.writeProblem(w, r, p)
	case errors.Is(err, ErrWindowed):
		s.writeProblem(w, r, problemOf("windowed", http.StatusBadRequest,
			"the view is windowed and cannot be scanned by key range yet; read one key's windows at "+
				"/v1/views/{view}/keys/{key}, optionally with from= and to="))
	case errors.Is(err, ErrRestoring):
		s.writeProblem(w, r, problemOf("restoring", http.StatusServiceUnavailable,
			"the partition is restoring its stores; retry after Retry-After"))
	case errors.As(err, &notOwner):
		w.Header().Set(movingHeader, "1")
		s.writeProblem(w, r, problemOf("moving", http.StatusServiceUnavailable,
			"the partition is moving between instances; retry later"))
	case errors.Is(err, ErrTooOld):
		s.writeProblem(w, r, problemOf("position-too-old", http.StatusGone,
			"changes after that position are no longer retained; read the current state and watch from its position"))
	case errors.Is(err, errNotCaughtUp):
		p := problemOf("not-caught-up", http.StatusServiceUnavailable,
			"the view has not reached min_offsets/min_lsn within wait; retry, or wait longer")
		var behind *notCaughtUpError
		if errors.As(err, &behind) {
			p.Position = &behind.at
			w.Header().Set(positionHeader, behind.at.Token())
		}
		s.writeProblem(w, r, p)
	case errors.Is(err, errVersionChanged), errors.Is(err, ErrNoVersion):
		p := problemOf("version-changed", http.StatusConflict,
			"the view switched to a rebuilt version while this scan paged through it; start the scan again without cursor=")
		p.Param = "cursor"
		s.writeProblem(w, r, p)
	case errors.Is(err, errTimeout), errors.Is(err, context.DeadlineExceeded):
		s.writeProblem(w, r, problemOf("timeout", http.StatusServiceUnavailable, "the request took too long; retry"))
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads an answer.
	default:
		s.cfg.Logger.Error("serve: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		s.writeProblem(w, r, problemOf("internal", http.StatusInternalServerError, ""))
	}
}
