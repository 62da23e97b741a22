package serve

import (
	"sync"
	"time"
)

// peerLogEvery is how often a failing peer is logged: one WARN per peer per interval, with
// the count of failures since the last, so that a dead owner read thousands of times a second
// does not flood the log.
const peerLogEvery = 10 * time.Second

// peerLog rate-limits the warnings about one peer.
type peerLog struct {
	mu    sync.Mutex
	peers map[string]*peerLogEntry
}

type peerLogEntry struct {
	logged time.Time
	failed int // failures not logged since then
}

// failed counts a failure of peer and reports whether to log it now, and how many failures
// (this one included) the line stands for.
func (l *peerLog) failed(peer string, now time.Time) (log bool, failures int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.peers == nil {
		l.peers = map[string]*peerLogEntry{}
	}
	e := l.peers[peer]
	if e == nil {
		e = &peerLogEntry{}
		l.peers[peer] = e
	}
	e.failed++
	if !e.logged.IsZero() && now.Sub(e.logged) < peerLogEvery {
		return false, 0
	}
	failures, e.failed, e.logged = e.failed, 0, now
	return true, failures
}
