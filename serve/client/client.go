package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Client reads the views of the tarn at one base URL. It is safe for concurrent use.
type Client struct {
	base string
	http *http.Client
}

// Option configures a Client.
type Option interface{ apply(*Client) }

type optionFunc func(*Client)

func (f optionFunc) apply(c *Client) { f(c) }

// WithHTTPClient sends the requests with hc instead of http.DefaultClient (for timeouts,
// transports, tokens).
func WithHTTPClient(hc *http.Client) Option {
	return optionFunc(func(c *Client) { c.http = hc })
}

// New returns a client of the tarn at base, e.g. "http://127.0.0.1:8080".
func New(base string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(base, "/"), http: http.DefaultClient}
	for _, o := range opts {
		o.apply(c)
	}
	return c
}

// ReadOption says what a read waits for.
type ReadOption interface{ applyRead(*readConfig) }

type readConfig struct {
	lsn     LSN
	records map[string]int64 // "topic:partition" → the highest offset named
	wait    time.Duration
}

type readOptionFunc func(*readConfig)

func (f readOptionFunc) applyRead(c *readConfig) { f(c) }

// AfterLSN waits until the view has applied the Postgres write whose LSN is lsn: the value
// of pg_current_wal_insert_lsn() read on the writing connection after its commit (at or past
// the commit whatever synchronous_commit is). Several AfterLSN keep the largest. By default a
// read waits for nothing.
func AfterLSN(lsn LSN) ReadOption {
	return readOptionFunc(func(c *readConfig) { c.lsn = max(c.lsn, lsn) })
}

// AfterRecord waits until the view has applied the record at offset of partition of topic,
// as the producer's acknowledgement named it; the topic must be an input of the view (any
// step of it), or the server answers 400. Several AfterRecord wait for all their records
// (on one partition, for the last: a view applies a partition in order).
func AfterRecord(topic string, partition int32, offset int64) ReadOption {
	return readOptionFunc(func(c *readConfig) {
		tp := topic + ":" + strconv.FormatInt(int64(partition), 10)
		if c.records == nil {
			c.records = map[string]int64{}
		}
		if cur, ok := c.records[tp]; !ok || offset > cur {
			c.records[tp] = offset
		}
	})
}

// Wait bounds how long the server waits for the writes, overriding its default (5s unless
// configured otherwise); it cannot exceed the server's maximum (30s by default).
func Wait(d time.Duration) ReadOption {
	return readOptionFunc(func(c *readConfig) { c.wait = d })
}

// Read is a key's value and the position of the view it was read at.
type Read struct {
	// Value is the JSON value.
	Value    json.RawMessage
	Position Position
}

// Position is how far the view had got when it answered (the server's position object).
type Position struct {
	// Offsets are, per partition of the view, the offset of the next record it applies.
	Offsets map[int32]int64 `json:"offsets"`
	// LSN is the Postgres LSN up to which the view has applied every write, for views fed by
	// CDC; 0 when the server knows none.
	LSN LSN `json:"lsn"`
	// Token is the position's opaque form, for after= and Last-Event-ID.
	Token string `json:"token"`
}

// Get reads key of view, first waiting as opts say. A key the view has no value for is a
// [*Problem] matching [ErrNotFound]; a view that did not catch up within the wait one matching
// [ErrNotCaughtUp]; other error answers are a [*Problem] too.
func (c *Client) Get(ctx context.Context, view, key string, opts ...ReadOption) (Read, error) {
	var rc readConfig
	for _, o := range opts {
		o.applyRead(&rc)
	}
	q := url.Values{}
	if rc.lsn != 0 {
		q.Set("min_lsn", rc.lsn.String())
	}
	if len(rc.records) > 0 {
		items := make([]string, 0, len(rc.records))
		for _, tp := range slices.Sorted(maps.Keys(rc.records)) {
			items = append(items, tp+":"+strconv.FormatInt(rc.records[tp], 10))
		}
		q.Set("min_offsets", strings.Join(items, ","))
	}
	if rc.wait > 0 {
		q.Set("wait", rc.wait.String())
	}
	path := "/v1/views/" + url.PathEscape(view) + "/keys/" + url.PathEscape(key)
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var body struct {
		Value    json.RawMessage `json:"value"`
		Position Position        `json:"position"`
	}
	if err := c.get(ctx, path, &body); err != nil {
		return Read{}, err
	}
	return Read{Value: body.Value, Position: body.Position}, nil
}

// get sends GET base+path and decodes a 200 answer into into, any other into a *Problem.
func (c *Client) get(ctx context.Context, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("client: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("client: GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return problemOf(resp, raw)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("client: GET %s: the answer is not the JSON expected: %w", path, err)
	}
	return nil
}

// maxBody bounds an answer read into memory: above the largest record tarn passes (16 MiB by
// default) with room for its JSON encoding.
const maxBody = 64 << 20

// problemOf reads a problem body, or makes one of the status when the body is not one (a proxy
// or a server that is not tarn answered).
func problemOf(resp *http.Response, raw []byte) *Problem {
	p := &Problem{}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct == "application/problem+json" {
		_ = json.Unmarshal(raw, p)
	}
	p.Status = resp.StatusCode
	if p.Detail == "" {
		p.Detail = strings.TrimSpace(string(raw))
	}
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		p.RetryAfter = time.Duration(s) * time.Second
	}
	return p
}
