package views

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// failure is why a view's engine is not processing right now, while it retries.
type failure struct {
	reason string
	since  time.Time
}

// transient reports whether err is a failure that passes by itself: Kafka unreachable or
// restarting, a coordinator or leader moving, a request timing out, or a failure whose
// effects are unknown (errRecreate). The engine retries those with backoff; any other error
// (a definition that does not match its stores, view code that panicked, a topic with the
// wrong partition count, a refused authorization) stops the view, so that it is not retried
// in silence for ever.
func transient(err error) bool {
	if err == nil {
		return false
	}
	var (
		ne  net.Error
		eof *kgo.ErrFirstReadEOF
	)
	switch {
	case errors.Is(err, errRecreate), errors.Is(err, errStalled), errors.As(err, &ne), errors.As(err, &eof),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, kgo.ErrClientClosed),
		kerr.IsRetriable(err):
		return true
	}
	return false
}

// Backoff of a failing engine: it doubles from retryFirst up to retryMax, and starts again
// from retryFirst once a session ran for retryReset.
const (
	retryFirst = 250 * time.Millisecond
	retryMax   = 30 * time.Second
	retryReset = time.Minute
)

func retryDelay(attempt int) time.Duration {
	d := retryFirst
	for range attempt {
		if d *= 2; d >= retryMax {
			return retryMax
		}
	}
	return d
}

// failing records why the engine is not processing (shown by Info and the failing metric).
func (e *engine) failing(err error) {
	since := e.rt.cfg.Now()
	if old := e.failed.Load(); old != nil {
		since = old.since
	}
	e.failed.Store(&failure{reason: err.Error(), since: since})
	e.rt.metrics.failing.WithLabelValues(string(e.v.name)).Set(1)
}

// recovered clears the failure once the engine processes again.
func (e *engine) recovered() {
	if old := e.failed.Swap(nil); old != nil {
		e.rt.metrics.failing.WithLabelValues(string(e.v.name)).Set(0)
		e.log.Info("views: processing again", "failing_for", e.rt.cfg.Now().Sub(old.since).Round(time.Millisecond))
	}
}

// retry waits before the next attempt after err, logging it; false when ctx ended. While no
// seed broker accepts a connection, the wait ends as soon as one does: a view should not sit
// out the rest of a 30 s backoff after Kafka came back.
func (e *engine) retry(ctx context.Context, what string, attempt int, err error) bool {
	delay := retryDelay(attempt)
	e.failing(err)
	e.log.Warn("views: "+what+" failed; retrying", "attempt", attempt+1, "retry_in", delay, "err", err)
	timer := time.NewTimer(delay)
	defer timer.Stop()
	var probe <-chan time.Time
	if delay > reachProbe && !reachable(ctx, e.rt.cfg.Brokers) {
		tick := time.NewTicker(reachProbe)
		defer tick.Stop()
		probe = tick.C
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case <-probe:
			if reachable(ctx, e.rt.cfg.Brokers) {
				e.log.Info("views: Kafka accepts connections again; retrying now", "attempt", attempt+2)
				return true
			}
		}
	}
}

// reachProbe is how often a retrying engine tries to connect to the seed brokers.
const reachProbe = time.Second

// reachable reports whether any seed broker accepts a TCP connection (Kafka's default port
// when a seed names none).
func reachable(ctx context.Context, brokers []string) bool {
	d := net.Dialer{Timeout: reachProbe / 2}
	for _, b := range brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			b = net.JoinHostPort(b, "9092")
		}
		if c, err := d.DialContext(ctx, "tcp", b); err == nil {
			c.Close()
			return true
		}
	}
	return false
}
