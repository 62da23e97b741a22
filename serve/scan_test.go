package serve_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/tarnhq/tarn/serve"
)

// scanAll follows next_cursor from the first page of u to the end and returns the keys.
func scanAll(t *testing.T, u string) []string {
	t.Helper()
	var keys []string
	cursor := ""
	for pages := 0; ; pages++ {
		page := u
		if cursor != "" {
			page += "&cursor=" + url.QueryEscape(cursor)
		}
		var body pageBody
		get(t, page).want(t, http.StatusOK).decode(t, &body)
		for _, e := range body.Entries {
			keys = append(keys, e.Key)
		}
		if !body.More {
			if body.NextCursor != "" {
				t.Fatalf("last page has a cursor: %+v", body)
			}
			return keys
		}
		if body.NextCursor == "" || pages > 1000 {
			t.Fatalf("page %d: more without a cursor", pages)
		}
		cursor = body.NextCursor
	}
}

func TestScanMergesPartitionsInKeyOrder(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 4, false)
	var want []string
	for i := range 57 {
		k := fmt.Sprintf("user/%03d", i)
		v.apply(t, []byte(k), i)
		want = append(want, k)
	}
	v.apply(t, []byte("other/1"), 0)
	v.apply(t, []byte("user0"), 0) // just past the prefix "user/"
	ts := start(t, b, func(c *serve.Config) { c.MaxLimit = 10 })

	for _, limit := range []int{1, 7, 10} {
		got := scanAll(t, fmt.Sprintf("%s/v1/views/v?prefix=user/&limit=%d", ts.URL, limit))
		if !slices.Equal(got, want) {
			t.Fatalf("limit %d: %d keys %v, want %d", limit, len(got), got, len(want))
		}
	}
	got := scanAll(t, ts.URL+"/v1/views/v?start=user/010&end=user/020")
	if !slices.Equal(got, want[10:20]) {
		t.Fatalf("range: %v", got)
	}
	all := scanAll(t, ts.URL+"/v1/views/v?limit=10")
	if len(all) != 59 || !slices.IsSorted(all) {
		t.Fatalf("whole view: %v", all)
	}

	var page pageBody
	r := get(t, ts.URL+"/v1/views/v?prefix=user/&limit=3").want(t, http.StatusOK)
	r.decode(t, &page)
	if page.Position.Offsets[0]+page.Position.Offsets[1]+page.Position.Offsets[2]+page.Position.Offsets[3] != 59 {
		t.Fatalf("position %v does not cover the 59 changes", page.Position.Offsets)
	}
	if r.Header.Get("Tarn-Position") != page.Position.Token() {
		t.Fatal("header and body positions differ")
	}
	do(t, http.MethodGet, ts.URL+"/v1/views/v?prefix=user/&limit=3", http.Header{"If-None-Match": {r.Header.Get("ETag")}}).
		want(t, http.StatusNotModified)
}

// A scan stays on the version its first page read: when a rebuild switches the view to a new
// version between pages, the next page answers 409 rather than mixing two definitions.
func TestScanPinsOneVersion(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 2, false)
	for i := range 10 {
		v.apply(t, []byte(fmt.Sprintf("k%02d", i)), i)
	}
	ts := start(t, b)
	var first pageBody
	get(t, ts.URL+"/v1/views/v?limit=3").want(t, http.StatusOK).decode(t, &first)
	if first.Version != 1 || first.NextCursor == "" {
		t.Fatalf("first page %+v", first)
	}
	next := ts.URL + "/v1/views/v?limit=3&cursor=" + url.QueryEscape(first.NextCursor)
	get(t, next).want(t, http.StatusOK)
	v.mu.Lock()
	v.version = 2
	v.mu.Unlock()
	if p := get(t, next).want(t, http.StatusConflict).problem(t); p.Type != "urn:tarn:problem:version-changed" {
		t.Fatalf("problem %+v", p)
	}
	var fresh pageBody
	get(t, ts.URL+"/v1/views/v?limit=3").want(t, http.StatusOK).decode(t, &fresh)
	if fresh.Version != 2 {
		t.Fatalf("a new scan reads version %d, want 2", fresh.Version)
	}
}

func TestScanBinaryKeys(t *testing.T) {
	b := newPebbleBackend(t)
	v := b.addView("v", 2, false)
	keys := [][]byte{{0x01, 0xff}, {0x01, 0xff, 0x00}, {0x02}, []byte("text")}
	for _, k := range keys {
		v.apply(t, k, "x")
	}
	ts := start(t, b)
	b64 := base64.RawURLEncoding.EncodeToString
	var body pageBody
	get(t, ts.URL+"/v1/views/v?enc=b64&prefix="+b64([]byte{0x01, 0xff})).want(t, http.StatusOK).decode(t, &body)
	if len(body.Entries) != 2 || body.Entries[0].Key != b64(keys[0]) || body.Entries[1].Key != b64(keys[1]) {
		t.Fatalf("entries %+v", body.Entries)
	}
	// In text mode a key that is not UTF-8 comes as key_b64.
	get(t, ts.URL+"/v1/views/v").want(t, http.StatusOK).decode(t, &body)
	var shown []string
	for _, e := range body.Entries {
		if e.KeyB64 != "" {
			shown = append(shown, "b64:"+e.KeyB64)
		} else {
			shown = append(shown, e.Key)
		}
	}
	want := "b64:Af8 b64:Af8A \x02 text"
	if strings.Join(shown, " ") != want {
		t.Fatalf("keys %q, want %q", strings.Join(shown, " "), want)
	}
}
