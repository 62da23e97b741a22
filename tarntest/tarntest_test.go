package tarntest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

func TestFlagValue(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		want   string
		wantOK bool
	}{
		{[]string{"serve", "--http", "127.0.0.1:1"}, "127.0.0.1:1", true},
		{[]string{"serve", "-http=127.0.0.1:2"}, "127.0.0.1:2", true},
		{[]string{"serve", "--kafka", "k:9092", "--http=:3"}, ":3", true},
		{[]string{"serve", "http", "x"}, "", false},
		{[]string{"serve", "--http"}, "", false},
		{[]string{"serve", "--https-proxy", "x"}, "", false},
	} {
		got, ok := flagValue(tc.args, "http")
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("flagValue(%q) = %q, %t; want %q, %t", tc.args, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestOptions(t *testing.T) {
	c := newConfig([]Option{WithKafka("a:1", "b:2"), WithPostgres("postgres://x"), WithApp("app"), WithExactlyOnce(),
		WithEnv(map[string]string{"TARN_APP": "other", "TARN_LOG_LEVEL": "debug"}), WithConfig("partitions: 1\n")})
	want := map[string]string{"TARN_KAFKA": "a:1,b:2", "TARN_POSTGRES": "postgres://x", "TARN_APP": "other",
		"TARN_EXACTLY_ONCE": "true", "TARN_LOG_LEVEL": "debug"}
	for k, v := range want {
		if c.env[k] != v {
			t.Errorf("env %s = %q, want %q", k, c.env[k], v)
		}
	}
	if !slices.Equal(c.cmd, []string{"serve"}) {
		t.Errorf("default command %q, want serve", c.cmd)
	}
	c.customizers(nil)
	if c.env["TARN_CONFIG"] != configPath {
		t.Errorf("TARN_CONFIG = %q with WithConfig, want %q", c.env["TARN_CONFIG"], configPath)
	}
}

// TestHostNetworkPicksPort checks that on the host network tarn is told a free loopback port
// unless the command names one.
func TestHostNetworkPicksPort(t *testing.T) {
	c := newConfig([]Option{WithHostNetwork()})
	base, err := c.listen()
	if err != nil {
		t.Fatal(err)
	}
	url, _ := base(context.Background(), nil)
	if c.env["TARN_HTTP"] == "" || url != "http://"+c.env["TARN_HTTP"] {
		t.Errorf("TARN_HTTP %q and base URL %q disagree", c.env["TARN_HTTP"], url)
	}
	c = newConfig([]Option{WithHostNetwork(), WithCmd("serve", "--http", "0.0.0.0:7070")})
	if base, err = c.listen(); err != nil {
		t.Fatal(err)
	}
	if url, _ := base(context.Background(), nil); url != "http://127.0.0.1:7070" || c.env["TARN_HTTP"] != "" {
		t.Errorf("with --http 0.0.0.0:7070: base %q, TARN_HTTP %q; want http://127.0.0.1:7070 and unset", url, c.env["TARN_HTTP"])
	}
}

func TestClient(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/views", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"views":[{"name":"orders-per-customer","version":1,"state":"running","partitions":3,"owned":[0,1,2],"lag":0}]}`))
	})
	mux.HandleFunc("GET /v1/views/orders-per-customer/keys/{key}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("key") {
		case "7":
			w.Write([]byte(`{"view":"orders-per-customer","key":"7","value":{"orders":2,"total":14.75},"position":{"offsets":{},"token":"t"}}`))
		case "a/b":
			w.Write([]byte(`{"value":1}`))
		default:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"type":"urn:tarn:problem:no-key","title":"No such key","status":404,"detail":"no value"}`))
		}
	})
	mux.HandleFunc("GET /v1/views/busy/keys/{key}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"type":"urn:tarn:problem:restoring","title":"Restoring","status":503,"detail":"partition 1 restores"}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cl := NewClient(srv.URL + "/")
	ctx := context.Background()

	vs, err := cl.Views(ctx)
	if err != nil || len(vs) != 1 || vs[0].Name != "orders-per-customer" || len(vs[0].Owned) != 3 {
		t.Fatalf("Views = %+v, %v", vs, err)
	}
	var stats struct{ Orders, Total float64 }
	if err := cl.Get(ctx, "orders-per-customer", "7", &stats); err != nil || stats.Orders != 2 || stats.Total != 14.75 {
		t.Fatalf("Get 7 = %+v, %v", stats, err)
	}
	var n int
	if err := cl.Get(ctx, "orders-per-customer", "a/b", &n); err != nil || n != 1 {
		t.Fatalf("Get a/b (escaped) = %d, %v", n, err)
	}
	if err := cl.Get(ctx, "orders-per-customer", "8", &stats); !errors.Is(err, ErrNoKey) {
		t.Fatalf("Get 8 = %v, want ErrNoKey", err)
	}
	err = cl.Get(ctx, "busy", "1", &stats)
	var p *Problem
	if !errors.As(err, &p) || p.Status != 503 || p.Type != "urn:tarn:problem:restoring" || errors.Is(err, ErrNoKey) {
		t.Fatalf("Get busy = %v, want a 503 restoring problem", err)
	}
}
