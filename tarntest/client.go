package tarntest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// ErrNoKey means the view has no value for the key (yet); use errors.Is. A test polling for a
// value to appear retries on it.
var ErrNoKey = errors.New("tarntest: the view has no value for this key")

// Problem is an error answer of tarn's API (an RFC 9457 problem body), e.g. a view still
// restoring (503, type urn:tarn:problem:restoring) or an unknown view (404).
type Problem struct {
	Status int    `json:"status"`
	Type   string `json:"type"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
}

func (p *Problem) Error() string {
	return fmt.Sprintf("tarntest: tarn answered %d %s: %s", p.Status, strings.TrimPrefix(p.Type, "urn:tarn:problem:"), p.Detail)
}

// Is makes errors.Is(err, ErrNoKey) true for tarn's no-key problem.
func (p *Problem) Is(target error) bool {
	return target == ErrNoKey && p.Type == "urn:tarn:problem:no-key"
}

// ViewInfo is one view as GET /v1/views lists it.
type ViewInfo struct {
	Name       string  `json:"name"`
	Version    int     `json:"version"`
	State      string  `json:"state"` // restoring, running or rebuilding
	Windowed   bool    `json:"windowed"`
	Partitions int32   `json:"partitions"`
	Owned      []int32 `json:"owned"` // partitions this instance owns
	Lag        int64   `json:"lag"`
}

// Client reads tarn's view API at one base URL. It is safe for concurrent use.
type Client struct {
	base string
	http *http.Client
}

// NewClient returns a client of the tarn at base (e.g. http://127.0.0.1:8080), using
// http.DefaultClient.
func NewClient(base string) *Client {
	return &Client{base: strings.TrimRight(base, "/"), http: http.DefaultClient}
}

// Get decodes the value of key in view into into (a pointer, as for json.Unmarshal). A key the
// view has no value for is an error matching ErrNoKey; other error answers are a [*Problem].
func (c *Client) Get(ctx context.Context, view, key string, into any) error {
	var body struct {
		Value json.RawMessage `json:"value"`
	}
	if err := c.get(ctx, "/v1/views/"+url.PathEscape(view)+"/keys/"+url.PathEscape(key), &body); err != nil {
		return err
	}
	if err := json.Unmarshal(body.Value, into); err != nil {
		return fmt.Errorf("tarntest: value of %s/%s: %w", view, key, err)
	}
	return nil
}

// Views lists the views of the instance with their state, partitions and lag.
func (c *Client) Views(ctx context.Context) ([]ViewInfo, error) {
	var body struct {
		Views []ViewInfo `json:"views"`
	}
	if err := c.get(ctx, "/v1/views", &body); err != nil {
		return nil, err
	}
	return body.Views, nil
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
		return fmt.Errorf("tarntest: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("tarntest: GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return problemOf(resp, raw)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("tarntest: GET %s: answer is not the JSON expected: %w", path, err)
	}
	return nil
}

// problemOf reads a problem body, or makes one of the status when the body is not one (a proxy
// or a server that is not tarn answered).
func problemOf(resp *http.Response, raw []byte) *Problem {
	p := &Problem{}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct == "application/problem+json" {
		json.Unmarshal(raw, p)
	}
	p.Status = resp.StatusCode
	if p.Detail == "" {
		p.Detail = strings.TrimSpace(string(raw))
	}
	if p.Type == "" {
		p.Type = "about:blank"
	}
	return p
}
