package serve_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/tarnhq/tarn/serve"
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
