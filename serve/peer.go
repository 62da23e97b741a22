package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// followPeers opens the changes stream of every other owner from after, waits for each one's
// first event (the position it starts from, so that the client's first position covers every
// partition), then relays their events into wt until ctx ends. It returns the merged start
// and each instance's LSN in it.
func (s *Server) followPeers(ctx context.Context, r *http.Request, remote map[string][]int32, after Position, wt *watcher) (Position, map[string]LSN, error) {
	var (
		mu    sync.Mutex
		start Position
		lsns  = map[string]LSN{}
		errs  []error
		wg    sync.WaitGroup
	)
	for addr, parts := range remote {
		wg.Go(func() {
			br, body, pos, err := s.openPeerStream(ctx, r, addr, parts, after.Only(parts))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			start, lsns[addr] = start.Merge(pos), pos.LSN
			go relay(br, body, addr, wt)
		})
	}
	wg.Wait()
	return start, lsns, errors.Join(errs...)
}

// openPeerStream connects to addr's changes stream for parts and reads its first event,
// within RequestTimeout.
func (s *Server) openPeerStream(ctx context.Context, r *http.Request, addr string, parts []int32, after Position) (*bufio.Reader, io.Closer, Position, error) {
	q := url.Values{}
	q.Set("enc", "b64")
	q.Set("partitions", joinPartitions(parts))
	q.Set("after", after.Token())
	// The connection lives as long as ctx; only its setup, up to the first event, is bounded.
	cctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(s.cfg.RequestTimeout, cancel)
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, strings.TrimSuffix(addr, "/")+r.URL.EscapedPath()+"?"+q.Encode(), nil)
	if err != nil {
		cancel()
		return nil, nil, Position{}, fmt.Errorf("serve: owner address %q is not a base URL: %w", addr, err)
	}
	s.forwardHeaders(r, req)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := s.cfg.PeerClient.Do(req)
	if err != nil {
		cancel()
		return nil, nil, Position{}, s.peerUnreachable(addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		pe := &peerError{addr: addr, retry: resp.Header.Get("Retry-After")}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&pe.problem); err != nil || pe.problem.Status != resp.StatusCode {
			return nil, nil, Position{}, fmt.Errorf("serve: instance %s answered %s without a problem body", addr, resp.Status)
		}
		return nil, nil, Position{}, pe
	}
	br := bufio.NewReader(resp.Body)
	ev, err := readEvent(br)
	if !timer.Stop() || err != nil || ev.name != "progress" {
		cancel()
		resp.Body.Close()
		return nil, nil, Position{}, s.peerUnreachable(addr, fmt.Errorf("no first progress event within %s: %v", s.cfg.RequestTimeout, err))
	}
	body := closerFunc(func() error { defer cancel(); return resp.Body.Close() })
	var data struct{ Position Position }
	if err := json.Unmarshal(ev.data, &data); err != nil {
		body.Close()
		return nil, nil, Position{}, fmt.Errorf("serve: instance %s sent an unreadable progress event: %w", addr, err)
	}
	return br, body, data.Position, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// relay pushes a peer's events into wt until the peer's stream ends or wt is full, and ends
// with an end item so that the client's stream ends with its position.
func relay(br *bufio.Reader, body io.Closer, addr string, wt *watcher) {
	defer body.Close()
	for {
		ev, err := readEvent(br)
		if err != nil {
			wt.push(item{end: fmt.Errorf("%w: %s: %v", errPeerEnded, addr, err)})
			return
		}
		it, err := peerItem(ev)
		if err != nil {
			wt.push(item{end: fmt.Errorf("%w: %s: %v", errPeerEnded, addr, err)})
			return
		}
		it.from = addr
		if !wt.push(it) || it.end != nil {
			return
		}
	}
}

// peerItem turns a peer's event into what the local stream does with it.
func peerItem(ev sseEvent) (item, error) {
	switch ev.name {
	case "change":
		var c changeJSON
		if err := json.Unmarshal(ev.data, &c); err != nil || c.Key == nil {
			return item{}, fmt.Errorf("unreadable change event")
		}
		k, err := base64.RawURLEncoding.DecodeString(*c.Key)
		if err != nil {
			return item{}, fmt.Errorf("change key is not base64url")
		}
		ch := Change{Partition: c.Partition, Offset: c.Offset, Key: k}
		if !c.Deleted {
			ch.Value = c.Value
		}
		if c.LSN != "" {
			if ch.LSN, err = ParseLSN(c.LSN); err != nil {
				return item{}, err
			}
		}
		return item{change: ch}, nil
	case "progress":
		var data struct{ Position Position }
		if err := json.Unmarshal(ev.data, &data); err != nil {
			return item{}, fmt.Errorf("unreadable progress event")
		}
		return item{progress: &data.Position}, nil
	default: // overflow, end
		return item{end: fmt.Errorf("%w: it sent %q", errPeerEnded, ev.name)}, nil
	}
}

// sseEvent is one server-sent event as read by a client.
type sseEvent struct {
	id, name string
	data     []byte
}

// maxEventBytes bounds one event read from a peer.
const maxEventBytes = 8 << 20

// readEvent reads one event (the fields tarn sends: id, event, data; comments skipped).
func readEvent(br *bufio.Reader) (sseEvent, error) {
	var ev sseEvent
	size := 0
	for {
		line, err := readLine(br, maxEventBytes-size)
		if err != nil {
			return ev, err
		}
		size += len(line)
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			if ev.name != "" || ev.data != nil {
				return ev, nil
			}
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			ev.id = string(value)
		case "event":
			ev.name = string(value)
		case "data":
			if ev.data != nil {
				ev.data = append(ev.data, '\n')
			}
			ev.data = append(ev.data, value...)
		}
	}
}

// readLine reads up to and including '\n', refusing lines longer than limit.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var long []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(long)+len(frag) > limit {
			return nil, fmt.Errorf("event longer than %d bytes", maxEventBytes)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, frag...)
			continue
		}
		if err != nil {
			return nil, err
		}
		if long == nil {
			return frag, nil
		}
		return append(long, frag...), nil
	}
}
