package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tarnhq/tarn/serve/client"
)

func TestGetSendsWhatToWaitFor(t *testing.T) {
	var got string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.RequestURI()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"view":"v","key":"k","value":{"n":1},"position":{"offsets":{"0":3},"lsn":"16/B374D848","token":"tok"}}`))
	}))
	defer ts.Close()
	c := client.New(ts.URL + "/")
	rd, err := c.Get(context.Background(), "v", "a/b", client.AfterLSN(0x1000), client.AfterLSN(0x16B374D848),
		client.AfterRecord("trades", 3, 41), client.AfterRecord("orders", 0, 7), client.AfterRecord("trades", 3, 12),
		client.Wait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if want := "/v1/views/v/keys/a%2Fb?min_lsn=16%2FB374D848&min_offsets=orders%3A0%3A7%2Ctrades%3A3%3A41&wait=2s"; got != want {
		t.Errorf("sent %s, want %s", got, want)
	}
	if string(rd.Value) != `{"n":1}` || rd.Position.LSN != 0x16B374D848 || rd.Position.Offsets[0] != 3 || rd.Position.Token != "tok" {
		t.Errorf("read %+v", rd)
	}
}

func TestGetErrors(t *testing.T) {
	for _, tc := range []struct {
		name, typ string
		status    int
		retry     string
		is        error
	}{
		{"not caught up", "not-caught-up", http.StatusServiceUnavailable, "2", client.ErrNotCaughtUp},
		{"no key", "no-key", http.StatusNotFound, "", client.ErrNotFound},
		{"bad parameter", "bad-parameter", http.StatusBadRequest, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/problem+json")
				if tc.retry != "" {
					w.Header().Set("Retry-After", tc.retry)
				}
				w.WriteHeader(tc.status)
				w.Write([]byte(`{"type":"urn:tarn:problem:` + tc.typ + `","status":1,"detail":"d","position":{"offsets":{"1":9},"lsn":"0/10","token":"t"}}`))
			}))
			defer ts.Close()
			_, err := client.New(ts.URL).Get(context.Background(), "v", "k")
			var p *client.Problem
			if !errors.As(err, &p) || p.Status != tc.status || p.Position == nil || p.Position.LSN != 0x10 {
				t.Fatalf("error %v (%+v)", err, p)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v is not %v", err, tc.is)
			}
			if errors.Is(err, client.ErrNotCaughtUp) != (tc.is == client.ErrNotCaughtUp) {
				t.Errorf("%v: errors.Is(ErrNotCaughtUp) wrong", err)
			}
			if want := map[string]time.Duration{"2": 2 * time.Second}[tc.retry]; p.RetryAfter != want {
				t.Errorf("Retry-After %s, want %s", p.RetryAfter, want)
			}
		})
	}
}

func TestLSN(t *testing.T) {
	for _, tc := range []struct {
		in  any
		out client.LSN
		bad bool
	}{
		{in: "16/B374D848", out: 0x16B374D848},
		{in: []byte("0/1"), out: 1},
		{in: "FFFFFFFF/FFFFFFFF", out: 1<<64 - 1},
		{in: nil, out: 0},
		{in: "16B374D848", bad: true},
		{in: "1/", bad: true},
		{in: "123456789/0", bad: true},
		{in: 42, bad: true},
	} {
		var l client.LSN
		err := l.Scan(tc.in)
		if tc.bad {
			if !errors.Is(err, client.ErrBadLSN) {
				t.Errorf("%v: error %v, want ErrBadLSN", tc.in, err)
			}
			continue
		}
		if err != nil || l != tc.out {
			t.Errorf("%v: %s, %v; want %s", tc.in, l, err, tc.out)
		}
		if s, ok := tc.in.(string); ok && l.String() != s {
			t.Errorf("%s formats as %s", s, l)
		}
	}
}
