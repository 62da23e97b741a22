package serve

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// contextKey keys the values serve puts in request contexts.
type contextKey struct{ name string }

func (k *contextKey) String() string { return "serve context key " + k.name }

// viewKey holds the View that the {view} path parameter names.
var viewKey = &contextKey{"view"}

// resolveView looks up the {view} of the path and keeps it in the request context.
func (s *Server) resolveView(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := url.PathUnescape(chi.URLParam(r, "view"))
		if err != nil {
			s.writeError(w, r, badParam("view", "malformed percent-encoding"))
			return
		}
		v, err := s.cfg.Backend.View(name)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		ref := &viewRef{name: name, view: v}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), viewKey, ref)))
	})
}

// viewRef is what resolveView keeps: the View and the name it was found by.
type viewRef struct {
	name string
	view View
}

// viewOf returns the View that resolveView found.
func viewOf(r *http.Request) View { return r.Context().Value(viewKey).(*viewRef).view }

// nameOf returns the name of the view that resolveView found.
func nameOf(r *http.Request) string { return r.Context().Value(viewKey).(*viewRef).name }

// metrics are the HTTP metrics of one Server.
type metrics struct {
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	watchers  prometheus.Gauge
	overflows prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tarn_http_requests_total", Help: "HTTP requests answered, by route, method and status code.",
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tarn_http_request_duration_seconds", Help: "Time to answer HTTP requests (to the end of the stream for watches), by route.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "method"}),
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tarn_http_watchers", Help: "Live streams (SSE and long-poll) open now.",
		}),
		overflows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tarn_http_watch_overflows_total", Help: "Live streams ended because the watcher fell behind its buffer.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.watchers, m.overflows} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("serve: registering metrics: %w", err)
		}
	}
	return m, nil
}

// escapedRoutePath makes chi route on the percent-encoded path, so that a key or view name
// holding "/" or "%" stays one segment; handlers unescape the parameters themselves.
func escapedRoutePath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rctx := chi.RouteContext(r.Context()); rctx != nil {
			rctx.RoutePath = r.URL.EscapedPath()
		}
		next.ServeHTTP(w, r)
	})
}

// recoverer turns a panic into a bare 500, logging the stack instead of sending it.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler { // net/http's way to abort a response; keep it
				panic(v)
			}
			s.cfg.Logger.Error("serve: handler panicked", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			s.writeProblem(w, r, problemOf("internal", http.StatusInternalServerError, ""))
		}()
		next.ServeHTTP(w, r)
	})
}

// instrument counts requests and times them per route pattern (never per raw path, which
// would make one series per key).
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		route := "unmatched"
		if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.RoutePattern() != "" {
			route = rctx.RoutePattern()
		}
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		s.metrics.requests.WithLabelValues(route, r.Method, strconv.Itoa(sw.status)).Inc()
		s.metrics.latency.WithLabelValues(route, r.Method).Observe(time.Since(start).Seconds())
	})
}

// statusWriter remembers the status code; Unwrap lets http.ResponseController reach the
// connection (flushes, deadlines) through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// limitBody bounds request bodies.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.cfg.MaxBodyBytes {
			s.writeProblem(w, r, problemOf("too-large", http.StatusRequestEntityTooLarge,
				fmt.Sprintf("request bodies are limited to %d bytes", s.cfg.MaxBodyBytes)))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// authenticate checks the bearer token in constant time, when one is configured.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if len(s.token) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), s.token) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tarn"`)
			s.writeProblem(w, r, problemOf("unauthorized", http.StatusUnauthorized,
				"send Authorization: Bearer <token> with the configured token"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
