package serve

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// scan serves GET /v1/views/{view}: a page of a key range or prefix, merged in key order over
// every partition of the view, from the local stores and, for partitions other instances own,
// from those instances (one request each, answered from one snapshot there). Each instance's
// part of a page comes from one consistent snapshot; pages are read at different times.
func (s *Server) scan(w http.ResponseWriter, r *http.Request) {
	p, err := parseParams(r.URL.RawQuery, scanParams, s.cfg.limits())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v := viewOf(r)
	if v.Info().Windowed {
		s.writeError(w, r, ErrWindowed)
		return
	}
	local, remote, err := s.placement(r, v, p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	req := ScanRequest{Start: p.start, Limit: p.limit, Version: scanVersion(v, p)}
	if p.hasEnd {
		req.End = p.end
	}
	if bytes.Compare(p.cursor, req.Start) > 0 {
		req.Start = p.cursor
	}
	ctx, cancel := s.readContext(r, p)
	defer cancel()
	results, err := s.gather(ctx, r, v, p, req, local, remote)
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	page := mergeResults(results, p.limit)
	if err := checkVersion(results, req.Version); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeScan(w, r, p, page)
}

// scanVersion is the version of the view a scan reads: the one its cursor or version= names,
// else the one serving now, so that every page and every instance's part of it reads the same.
func scanVersion(v View, p params) int {
	switch {
	case p.cursorVersion != 0:
		return p.cursorVersion
	case p.version != 0:
		return p.version
	}
	return v.Info().Version
}

// checkVersion keeps a scan on one version of the view: every instance's part of a page must
// come from the same version, and a page reached by a cursor from the version its first page
// read. A rebuild that switches versions in between ends the scan with errVersionChanged,
// rather than handing the client pages of two different definitions.
func checkVersion(results []ScanResult, want int) error {
	for _, res := range results {
		if res.Version == 0 {
			continue // a source that had no partitions to read
		}
		if want == 0 {
			want = res.Version
		}
		if res.Version != want {
			return fmt.Errorf("%w: version %d, then %d", errVersionChanged, want, res.Version)
		}
	}
	return nil
}

// placement splits the partitions a scan covers into local ones and, per owner, remote
// ones. With partitions= (how instances fan out to each other) all must be local.
func (s *Server) placement(r *http.Request, v View, p params) ([]int32, map[string][]int32, error) {
	if p.partitions != nil {
		if err := checkPartitions(p.partitions, v.Info().Partitions); err != nil {
			return nil, nil, err
		}
		for _, part := range p.partitions {
			if o := v.Owner(part); !o.Local {
				return nil, nil, &NotOwnerError{Partition: part, Addr: o.Addr}
			}
		}
		return p.partitions, nil, nil
	}
	var local []int32
	remote := map[string][]int32{}
	for part := range v.Info().Partitions {
		o := v.Owner(part)
		switch {
		case o.Local:
			local = append(local, part)
		case o.Addr == "" || r.Header.Get(forwardedHeader) != "":
			return nil, nil, &NotOwnerError{Partition: part, Addr: o.Addr}
		default:
			remote[o.Addr] = append(remote[o.Addr], part)
		}
	}
	return local, remote, nil
}

// gather scans the local partitions and asks each remote owner for its own, concurrently.
func (s *Server) gather(ctx context.Context, r *http.Request, v View, p params, req ScanRequest, local []int32, remote map[string][]int32) ([]ScanResult, error) {
	results := make([]ScanResult, 1+len(remote))
	g, gctx := errgroup.WithContext(ctx)
	if len(local) > 0 {
		g.Go(func() error {
			if err := s.awaitMin(gctx, v, p); err != nil {
				return err
			}
			req := req
			req.Partitions = local
			res, err := s.scanLocal(gctx, r, v, p, req)
			results[0] = res
			return err
		})
	}
	i := 1
	for _, addr := range slices.Sorted(maps.Keys(remote)) {
		slot := &results[i]
		i++
		g.Go(func() error {
			res, err := s.scanRemote(gctx, r, addr, p, req, remote[addr])
			*slot = res
			return err
		})
	}
	return results, g.Wait()
}

// scanLocal scans local partitions, collapsing identical concurrent scans (except those that
// waited for a position, as in readKey).
func (s *Server) scanLocal(ctx context.Context, r *http.Request, v View, p params, req ScanRequest) (ScanResult, error) {
	if p.hasMin {
		return v.Scan(ctx, req)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "s%s\x00%d\x00%d\x00%q\x00%q\x00%v", nameOf(r), req.Version, req.Limit, req.Start, req.End, req.Partitions)
	res, err, _ := s.reads.Do(b.String(), func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RequestTimeout)
		defer cancel()
		return v.Scan(rctx, req)
	})
	if err != nil {
		return ScanResult{}, err
	}
	return res.(ScanResult), nil
}

// scanJSON is the body of a scan answer.
type scanJSON struct {
	View string `json:"view"`
	// Version is the version of the view every entry was read from (see checkVersion).
	Version    int         `json:"version"`
	Entries    []entryJSON `json:"entries"`
	More       bool        `json:"more"`
	NextCursor string      `json:"next_cursor,omitempty"`
	Position   Position    `json:"position"`
}

// entryJSON is one entry of a scan: key as text, or key_b64 for a key that is not UTF-8 text
// (with enc=b64, key holds base64url for every key).
type entryJSON struct {
	Key    *string         `json:"key,omitempty"`
	KeyB64 *string         `json:"key_b64,omitempty"`
	Value  json.RawMessage `json:"value"`
}

// scanRemote asks the instance at addr for its partitions of the page.
func (s *Server) scanRemote(ctx context.Context, r *http.Request, addr string, p params, req ScanRequest, parts []int32) (ScanResult, error) {
	q := url.Values{}
	q.Set("enc", "b64")
	q.Set("start", base64.RawURLEncoding.EncodeToString(req.Start))
	if req.End != nil {
		q.Set("end", base64.RawURLEncoding.EncodeToString(req.End))
	}
	q.Set("limit", strconv.Itoa(req.Limit))
	q.Set("partitions", joinPartitions(parts))
	q.Set("version", strconv.Itoa(req.Version))
	for _, name := range []string{"min_offsets", "min_lsn", "wait"} {
		if v := r.URL.Query().Get(name); v != "" {
			q.Set(name, v)
		}
	}
	var body scanJSON
	if err := s.peerGet(ctx, r, addr, r.URL.EscapedPath()+"?"+q.Encode(), &body); err != nil {
		return ScanResult{}, err
	}
	res := ScanResult{Position: body.Position, More: body.More, Version: body.Version, Entries: make([]Entry, 0, len(body.Entries))}
	for _, e := range body.Entries {
		if e.Key == nil {
			return ScanResult{}, fmt.Errorf("serve: instance %s sent an entry without a key", addr)
		}
		k, err := base64.RawURLEncoding.DecodeString(*e.Key)
		if err != nil {
			return ScanResult{}, fmt.Errorf("serve: instance %s sent a key that is not base64url: %w", addr, err)
		}
		res.Entries = append(res.Entries, Entry{Key: k, Value: e.Value})
	}
	return res, nil
}

func joinPartitions(parts []int32) string {
	b := make([]byte, 0, len(parts)*3)
	for i, p := range parts {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(p), 10)
	}
	return string(b)
}

// peerGet GETs path from the instance at addr and decodes its JSON answer; a problem answer
// becomes a *peerError passed on to the client as it came.
func (s *Server) peerGet(ctx context.Context, r *http.Request, addr, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(addr, "/")+path, nil)
	if err != nil {
		return fmt.Errorf("serve: owner address %q is not a base URL: %w", addr, err)
	}
	s.forwardHeaders(r, req)
	resp, err := s.cfg.PeerClient.Do(req)
	if err != nil {
		return s.peerUnreachable(addr, err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 256<<20))
	if resp.StatusCode != http.StatusOK {
		pe := &peerError{addr: addr, retry: resp.Header.Get("Retry-After")}
		if err := dec.Decode(&pe.problem); err != nil || pe.problem.Status != resp.StatusCode {
			return fmt.Errorf("serve: instance %s answered %s without a problem body", addr, resp.Status)
		}
		return pe
	}
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("serve: decoding the answer of instance %s: %w", addr, err)
	}
	return nil
}

// forwardHeaders marks a request to a peer as forwarded and passes the caller's credentials.
func (s *Server) forwardHeaders(from, to *http.Request) {
	to.Header.Set(forwardedHeader, "1")
	if a := from.Header.Get("Authorization"); a != "" {
		to.Header.Set("Authorization", a)
	}
}

func (s *Server) peerUnreachable(addr string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if log, n := s.peerLog.failed(addr, time.Now()); log {
		s.cfg.Logger.Warn("serve: instance did not answer", "instance", addr, "failures", n, "per", peerLogEvery, "err", err)
	}
	return &peerError{addr: addr, problem: problemOf("owner-unreachable", http.StatusBadGateway,
		"an instance that owns some of the view's partitions did not answer; retry")}
}

// mergeResults merges per-source results, each in key order, into one page of up to limit
// entries. Keys are unique across sources, since each key lives in one partition.
func mergeResults(results []ScanResult, limit int) ScanResult {
	var out ScanResult
	idx := make([]int, len(results))
	for len(out.Entries) < limit {
		best := -1
		for i, res := range results {
			if idx[i] < len(res.Entries) && (best < 0 || bytes.Compare(res.Entries[idx[i]].Key, results[best].Entries[idx[best]].Key) < 0) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		out.Entries = append(out.Entries, results[best].Entries[idx[best]])
		idx[best]++
	}
	joined := false
	for i, res := range results {
		out.Version = max(out.Version, res.Version)
		// An empty result (no local partitions) vouches for nothing, not for LSN 0.
		switch {
		case res.Position.IsZero():
		case !joined:
			out.Position, joined = res.Position, true
		default:
			out.Position = out.Position.Join(res.Position)
		}
		out.More = out.More || res.More || idx[i] < len(res.Entries)
	}
	return out
}

func (s *Server) writeScan(w http.ResponseWriter, r *http.Request, p params, res ScanResult) {
	body := scanJSON{View: nameOf(r), Version: res.Version, Entries: make([]entryJSON, len(res.Entries)), More: res.More, Position: res.Position}
	h := etagParts(res.Entries)
	for i, e := range res.Entries {
		k, isB64 := encodeKey(e.Key, p.b64)
		if isB64 && !p.b64 {
			body.Entries[i] = entryJSON{KeyB64: &k, Value: e.Value}
		} else {
			body.Entries[i] = entryJSON{Key: &k, Value: e.Value}
		}
	}
	if res.More && len(res.Entries) > 0 {
		// The next page starts just above the last key of this one.
		body.NextCursor = makeCursor(res.Version, append(bytes.Clone(res.Entries[len(res.Entries)-1].Key), 0))
	}
	enc, err := json.Marshal(body)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("serve: encoding a scan: %w", err))
		return
	}
	w.Header().Set(positionHeader, res.Position.Token())
	s.writeBody(w, r, append(enc, '\n'), etagOf(h...))
}

// etagParts lists the data of entries for etagOf.
func etagParts(entries []Entry) [][]byte {
	parts := make([][]byte, 0, 2*len(entries))
	for _, e := range entries {
		parts = append(parts, e.Key, e.Value)
	}
	return parts
}
