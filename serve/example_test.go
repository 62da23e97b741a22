package serve_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/tarnhq/tarn/serve"
	"github.com/tarnhq/tarn/serve/client"
)

// Example serves a view and reads one key of it over HTTP. The backend here is the test
// suite's Pebble-backed one; in tarn it is the views runtime.
func Example() {
	dir, err := os.MkdirTemp("", "serve-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	b, err := openPebbleBackend(dir)
	if err != nil {
		panic(err)
	}
	defer b.db.Close()
	orders := b.addView("orders", 2, false)
	if _, err := orders.applyJSON([]byte("o-1"), []byte(`{"total":12}`), 0); err != nil {
		panic(err)
	}

	s, err := serve.New(serve.Config{Backend: b})
	if err != nil {
		panic(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()

	resp, err := http.Get(ts.URL + "/v1/views/orders/keys/o-1")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, resp.Header.Get("Tarn-Position"))
	fmt.Print(string(body))
	// Output:
	// 200 OK AQACAAEBAA
	// {"view":"orders","key":"o-1","value":{"total":12},"position":{"offsets":{"0":1,"1":0},"token":"AQACAAEBAA"}}
}

// A position's token is what clients pass back in after=, Last-Event-ID and cursors.
func ExamplePosition_Token() {
	pos := serve.Position{Offsets: map[int32]int64{0: 42, 3: 7}, LSN: 0x16B374D848}
	tok := pos.Token()
	back, err := serve.ParsePosition(tok)
	fmt.Println(tok, err, back.Offsets[0], back.Offsets[3], back.LSN)

	// min_offsets names the records a client wrote; the view has them once past each.
	min, _, _ := serve.ParseMinOffsets("0:41,3:6")
	fmt.Println(pos.Reached(min))
	// Output:
	// AQHIsNOb6wICACoDBw <nil> 42 7 16/B374D848
	// true
}

// Example_readYourWrites writes then reads with the Go client: a producer's record on the
// view's input topic (here the test backend's "orders-events", whose record at offset o is
// the view's change at o) is named by its topic, partition and offset, and the read waits
// until the view has applied it. A record the view does not reach in time is ErrNotCaughtUp.
func Example_readYourWrites() {
	dir, err := os.MkdirTemp("", "serve-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	b, err := openPebbleBackend(dir)
	if err != nil {
		panic(err)
	}
	defer b.db.Close()
	orders := b.addView("orders", 2, false)
	first, err := orders.applyJSON([]byte("o-1"), []byte(`{"total":12}`), 0)
	if err != nil {
		panic(err)
	}
	s, err := serve.New(serve.Config{Backend: b, RetryAfter: time.Second})
	if err != nil {
		panic(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()

	// The producer's record at the next offset is acknowledged, and applied a moment later.
	written := first.Offset + 1
	go func() {
		time.Sleep(20 * time.Millisecond)
		if _, err := orders.applyJSON([]byte("o-1"), []byte(`{"total":15}`), 0); err != nil {
			panic(err)
		}
	}()
	c := client.New(ts.URL)
	ctx := context.Background()
	rd, err := c.Get(ctx, "orders", "o-1", client.AfterRecord("orders-events", first.Partition, written))
	fmt.Println(string(rd.Value), rd.Position.Offsets[first.Partition] > written, err)

	_, err = c.Get(ctx, "orders", "o-1", client.AfterRecord("orders-events", first.Partition, 99), client.Wait(50*time.Millisecond))
	var p *client.Problem
	fmt.Println(errors.Is(err, client.ErrNotCaughtUp), errors.As(err, &p) && p.RetryAfter == time.Second)
	// Output:
	// {"total":15} true <nil>
	// true true
}
