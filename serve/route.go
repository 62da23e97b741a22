package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"
)

// route sends a request for partition part to its owner at addr: proxied by default (the
// answer streams through, watches included), or redirected with Config.Redirect. A request
// that another instance already forwarded is never sent on, so that instances that disagree
// about ownership for a moment cannot bounce it between them; it gets a 503 to retry.
func (s *Server) route(w http.ResponseWriter, r *http.Request, part int32, addr string) {
	if addr == "" || r.Header.Get(forwardedHeader) != "" {
		s.writeError(w, r, &NotOwnerError{Partition: part, Addr: addr})
		return
	}
	target, err := url.Parse(addr)
	if err != nil || target.Scheme == "" || target.Host == "" {
		s.writeError(w, r, fmt.Errorf("serve: owner address %q of partition %d is not a base URL: %v", addr, part, err))
		return
	}
	if s.cfg.Redirect {
		loc := *target
		loc.Path, loc.RawPath = r.URL.Path, r.URL.RawPath
		loc.RawQuery = r.URL.RawQuery
		http.Redirect(w, r, loc.String(), http.StatusTemporaryRedirect)
		return
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Set(forwardedHeader, "1")
		},
		Transport: s.cfg.PeerClient.Transport,
		// Flush at once so that watches stream through the proxy.
		FlushInterval: -1,
		// An owner that answers that the partition moved away from it is asked no more: the
		// read waits for the new owner instead (ErrorHandler).
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(movingHeader) != "" {
				resp.Body.Close()
				return errMovedAway
			}
			return nil
		},
		// The handler is given the request as sent to the owner, marked forwarded; a retry
		// from here is this instance's own, for its client, so it works on the request
		// the client sent (a forwarded one could not be routed on: route would refuse it).
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			if s.rerouteMoved(w, r, part, addr) {
				return
			}
			if errors.Is(err, errMovedAway) {
				s.writeError(w, r, &NotOwnerError{Partition: part})
				return
			}
			if log, n := s.peerLog.failed(addr, time.Now()); log {
				s.cfg.Logger.Warn("serve: proxying to owner failed", "owner", addr, "partition", part,
					"failures", n, "per", peerLogEvery, "err", err)
			}
			s.writeProblem(w, r, problemOf("owner-unreachable", http.StatusBadGateway,
				fmt.Sprintf("the instance that owns partition %d did not answer; retry", part)))
		},
	}
	proxy.ServeHTTP(w, r)
}

// errMovedAway is a proxied owner's answer that it no longer has the partition.
var errMovedAway = errors.New("serve: the owner no longer has the partition")

// rerouteMoved serves again a key read whose owner at addr failed or gave the partition up
// (a handover under way): once the partition has another owner, or is here, within the
// read's MoveWait budget. It reports false when the budget ran out or the read is not a
// plain key read (a watch already streaming cannot be retried).
func (s *Server) rerouteMoved(w http.ResponseWriter, r *http.Request, part int32, addr string) bool {
	if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/keys/") || r.URL.Query().Has("watch") {
		return false
	}
	deadline, ok := r.Context().Value(moveDeadlineKey{}).(time.Time)
	if !ok {
		deadline = time.Now().Add(s.cfg.MoveWait)
		r = r.WithContext(context.WithValue(r.Context(), moveDeadlineKey{}, deadline))
	} else if !time.Now().Before(deadline) {
		return false // retried already, for all the budget
	}
	v := viewOf(r)
	o := s.settledOwner(r, v, part, addr)
	if !o.Local && o.Addr == "" || !time.Now().Before(deadline) {
		return false
	}
	s.key(w, r)
	return true
}
