package serve

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a [Server]. New copies it and fills the defaults named on each field.
type Config struct {
	// Backend supplies the views. Required.
	Backend Backend

	// Home, when set, answers GET / (a web page for people; not part of the API, so neither
	// authenticated nor in openapi.yaml). Default nil (404).
	Home http.Handler

	// Addr is the address Run listens on. Default ":8080".
	Addr string
	// Redirect makes a request for a key owned by another instance get a 307 redirect to the
	// owner instead of being proxied there. Default false (proxy).
	Redirect bool

	// Token, when set, is the bearer token every /v1 request must present. Default "" (no
	// authentication). At most one of Token, TokenEnv and TokenFile may be set.
	Token string
	// TokenEnv names an environment variable holding the token, read by New. Default "".
	TokenEnv string
	// TokenFile names a file holding the token (surrounding white space trimmed), read by New.
	// Default "".
	TokenFile string

	// TLSCertFile and TLSKeyFile make Run serve HTTPS with this key pair. Default "" (HTTP).
	TLSCertFile, TLSKeyFile string
	// TLSConfig, when set, is used by Run for HTTPS (with the files above, if given).
	// Default nil.
	TLSConfig *tls.Config
	// PeerClient sends proxied and fanned-out requests to other instances. It must not have a
	// total timeout, since proxied watches stream. Default: a client on a clone of
	// http.DefaultTransport.
	PeerClient *http.Client

	// DefaultLimit is the scan page size when limit= is absent. Default 100, or MaxLimit when
	// that is smaller.
	DefaultLimit int
	// MaxLimit is the largest limit= accepted. Default 10000.
	MaxLimit int
	// DefaultWait is how long min_offsets=/min_lsn= wait when wait= is absent. Default 5s.
	DefaultWait time.Duration
	// MaxWait is the largest wait= accepted (long-poll and min_offsets=/min_lsn=). Default 30s.
	MaxWait time.Duration
	// RequestTimeout bounds the work of one non-streaming request, on top of its wait.
	// Default 10s.
	RequestTimeout time.Duration
	// ReadHeaderTimeout and IdleTimeout configure Run's http.Server. Defaults 5s and 120s.
	ReadHeaderTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes bounds request headers. Default 64 KiB.
	MaxHeaderBytes int
	// MaxBodyBytes bounds request bodies. Default 1 MiB.
	MaxBodyBytes int64
	// MoveWait is how long a key read waits for a partition that is between owners (its
	// owner left and no one has it yet, it restores here, or the owner it was sent to no
	// longer has it) before answering 503: a handover takes one to a few seconds (the group
	// rebalances, then the others learn the new owner), so a read during one is answered
	// late rather than failed. Default 5s (reads during handovers of three instances on a
	// loaded 2-core machine waited up to 1.1s); 0 after setDefaults is not possible, a
	// negative value turns the wait off.
	MoveWait time.Duration
	// RetryAfter is what 503 answers put in Retry-After (rounded up to seconds). Default 2s.
	RetryAfter time.Duration

	// ProgressInterval is how long a live stream may be idle before it sends a progress event.
	// Default 15s.
	ProgressInterval time.Duration
	// WatchBuffer is the number of changes buffered per watcher; a watcher that falls further
	// behind has its stream ended with the position to resume from. Default 1024.
	WatchBuffer int

	// Logger logs errors that responses do not show. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the HTTP metrics. Default: a new private registry.
	Registerer prometheus.Registerer
	// Gatherer is what /metrics serves, so that other packages' collectors registered on the
	// same Registerer show up too. Default: Registerer when it is a Gatherer (a
	// *prometheus.Registry is), else required.
	Gatherer prometheus.Gatherer
}

func (c *Config) setDefaults() {
	setDefault(&c.Addr, ":8080")
	setDefault(&c.MaxLimit, 10000)
	setDefault(&c.DefaultLimit, min(100, max(c.MaxLimit, 1)))
	setDefault(&c.DefaultWait, 5*time.Second)
	setDefault(&c.MaxWait, 30*time.Second)
	setDefault(&c.RequestTimeout, 10*time.Second)
	setDefault(&c.ReadHeaderTimeout, 5*time.Second)
	setDefault(&c.IdleTimeout, 120*time.Second)
	setDefault(&c.MaxHeaderBytes, 64<<10)
	setDefault(&c.MaxBodyBytes, 1<<20)
	setDefault(&c.RetryAfter, 2*time.Second)
	setDefault(&c.MoveWait, 5*time.Second)
	setDefault(&c.ProgressInterval, 15*time.Second)
	setDefault(&c.WatchBuffer, 1024)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.PeerClient == nil {
		c.PeerClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if c.Registerer == nil {
		reg := prometheus.NewRegistry()
		c.Registerer, c.Gatherer = reg, reg
	}
	if g, ok := c.Registerer.(prometheus.Gatherer); ok && c.Gatherer == nil {
		c.Gatherer = g
	}
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate reports every problem of c at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("serve: "+format, args...)) }
	if c.Backend == nil {
		bad("Config.Backend is required")
	}
	if n := countSet(c.Token, c.TokenEnv, c.TokenFile); n > 1 {
		bad("set only one of Config.Token, TokenEnv and TokenFile (%d are set)", n)
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		bad("Config.TLSCertFile and TLSKeyFile go together; set both or neither")
	}
	if c.DefaultLimit < 1 || c.MaxLimit < c.DefaultLimit {
		bad("need 1 <= Config.DefaultLimit (%d) <= MaxLimit (%d)", c.DefaultLimit, c.MaxLimit)
	}
	if c.DefaultWait < 0 || c.MaxWait < c.DefaultWait {
		bad("need 0 <= Config.DefaultWait (%s) <= MaxWait (%s)", c.DefaultWait, c.MaxWait)
	}
	for name, d := range map[string]time.Duration{
		"RequestTimeout": c.RequestTimeout, "ReadHeaderTimeout": c.ReadHeaderTimeout,
		"IdleTimeout": c.IdleTimeout, "RetryAfter": c.RetryAfter, "ProgressInterval": c.ProgressInterval,
	} {
		if d < 0 {
			bad("Config.%s is negative (%s)", name, d)
		}
	}
	if c.MaxHeaderBytes < 0 || c.MaxBodyBytes < 0 || c.WatchBuffer < 0 {
		bad("Config.MaxHeaderBytes, MaxBodyBytes and WatchBuffer must not be negative")
	}
	if c.Registerer != nil && c.Gatherer == nil {
		bad("Config.Gatherer is required when Config.Registerer is not a prometheus.Gatherer")
	}
	return errors.Join(errs...)
}

func countSet(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

// loadToken returns the configured bearer token, reading it from the environment or a file.
func (c *Config) loadToken() (string, error) {
	switch {
	case c.TokenEnv != "":
		tok := strings.TrimSpace(os.Getenv(c.TokenEnv))
		if tok == "" {
			return "", fmt.Errorf("serve: environment variable %s (Config.TokenEnv) is empty or unset", c.TokenEnv)
		}
		return tok, nil
	case c.TokenFile != "":
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			return "", fmt.Errorf("serve: reading Config.TokenFile: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("serve: token file %s (Config.TokenFile) is empty", c.TokenFile)
		}
		return tok, nil
	}
	return c.Token, nil
}
