package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/singleflight"
)

// Server is the HTTP API of one tarn instance. Its handler is built once, by New; it is safe
// for concurrent use.
type Server struct {
	cfg     Config
	token   []byte
	handler http.Handler
	metrics *metrics
	// reads collapses identical concurrent reads into one backend call.
	reads singleflight.Group
	// peerLog rate-limits the warnings about peers that do not answer.
	peerLog peerLog
}

// New checks cfg, loads the bearer token and builds the handler.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tok, err := cfg.loadToken()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, token: []byte(tok), metrics: m}
	s.handler = s.routes()
	return s, nil
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// routes builds the router. Every route here is also in openapi.yaml (a test checks).
func (s *Server) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(escapedRoutePath, s.recoverer, s.instrument, s.limitBody)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.writeProblem(w, r, problemOf("no-route", http.StatusNotFound, "no such path; see /v1/openapi.yaml"))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.writeProblem(w, r, problemOf("method", http.StatusMethodNotAllowed, "method not allowed on this path"))
	})
	if s.cfg.Home != nil {
		r.Method(http.MethodGet, "/", s.cfg.Home)
	}
	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	r.Route("/v1", func(r chi.Router) {
		r.Use(s.authenticate)
		r.Get("/openapi.yaml", serveOpenAPI)
		r.Get("/views", s.listViews)
		vr := r.With(s.resolveView)
		vr.Get("/views/{view}", s.scan)
		vr.Get("/views/{view}/keys/{key}", s.key)
		vr.Get("/views/{view}/changes", s.changes)
		vr.Post("/views/{view}/rebuild", s.rebuild)
	})
	return r
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// readyz answers 200 once every store assigned here has restored.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.Backend.Ready(); err != nil {
		s.writeProblem(w, r, problemOf("not-ready", http.StatusServiceUnavailable, err.Error()))
		return
	}
	s.healthz(w, r)
}

// Run serves on cfg.Addr (HTTPS when TLS is configured) until ctx ends, then shuts down,
// giving open requests up to 5 seconds. It returns nil after a shutdown caused by ctx.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("serve: listening on %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve is Run on a listener the caller made.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		TLSConfig:         s.cfg.TLSConfig,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() {
		if s.cfg.TLSConfig != nil || s.cfg.TLSCertFile != "" {
			errc <- srv.ServeTLS(ln, s.cfg.TLSCertFile, s.cfg.TLSKeyFile)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("serve: shutting down: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
