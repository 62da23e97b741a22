package serve_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tarnhq/tarn/serve"
)

func TestServeTLSAndShutdown(t *testing.T) {
	// Borrow httptest's self-signed certificate and a client that trusts it.
	donor := httptest.NewTLSServer(http.NotFoundHandler())
	certs, client := donor.TLS.Certificates, donor.Client()
	donor.Close()

	b := newPebbleBackend(t)
	v := b.addView("v", 1, false)
	v.apply(t, []byte("k"), 1)
	s, err := serve.New(serve.Config{Backend: b, TLSConfig: &tls.Config{Certificates: certs}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()

	resp, err := client.Get("https://" + ln.Addr().String() + "/v1/views/v/keys/k")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Fatalf("status %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	// A watch open at shutdown does not hold it up: request contexts end with ctx.
	req, _ := http.NewRequest(http.MethodGet, "https://"+ln.Addr().String()+"/v1/views/v/changes", nil)
	watch, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after shutdown: %v", err)
	}
}
