package serve

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
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
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.cfg.Logger.Warn("serve: proxying to owner failed", "owner", addr, "partition", part, "err", err)
			s.writeProblem(w, r, problemOf("owner-unreachable", http.StatusBadGateway,
				fmt.Sprintf("the instance that owns partition %d did not answer; retry", part)))
		},
	}
	proxy.ServeHTTP(w, r)
}
