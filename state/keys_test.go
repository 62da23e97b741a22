package state

import (
	"bytes"
	"math"
	"testing"
)

func TestFloorDiv(t *testing.T) {
	for _, c := range []struct{ a, b, want int64 }{
		{0, 10, 0}, {9, 10, 0}, {10, 10, 1}, {-1, 10, -1}, {-10, 10, -1}, {-11, 10, -2},
		{math.MinInt64, 1000, math.MinInt64/1000 - 1},
	} {
		if got := floorDiv(c.a, c.b); got != c.want {
			t.Errorf("floorDiv(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct{ in, want []byte }{
		{[]byte("ab"), []byte("ac")},
		{[]byte{'a', 0xff}, []byte("b")},
		{[]byte{0xff, 0xff}, nil},
	} {
		if got := prefixEnd(c.in); !bytes.Equal(got, c.want) {
			t.Errorf("prefixEnd(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestVersionPrefixIsolation checks that one version's prefix never covers another view's or
// version's keys, including names that are prefixes of each other.
func TestVersionPrefixIsolation(t *testing.T) {
	p := versionPrefix("app", "view", 1)
	for _, id := range []ID{
		{App: "app", View: "view2", Version: 1, Store: "s"},
		{App: "app", View: "vie", Version: 1, Store: "s"},
		{App: "app", View: "view", Version: 2, Store: "s"},
		{App: "app", View: "view", Version: 256 + 1, Store: "s"},
		{App: "ap", View: "pview", Version: 1, Store: "s"},
	} {
		if bytes.HasPrefix(partitionPrefix(id), p) {
			t.Errorf("%v falls under the prefix of app/view/1", id)
		}
	}
	if !bytes.HasPrefix(partitionPrefix(ID{App: "app", View: "view", Version: 1, Store: "s", Partition: 7}), p) {
		t.Error("a partition of app/view/1 is not under its prefix")
	}
}

func TestWindowChangelogKey(t *testing.T) {
	k := appendWindowChangelogKey(nil, []byte("user-1"), -42)
	key, start, err := decodeWindowChangelogKey(k)
	if err != nil || string(key) != "user-1" || start != -42 {
		t.Fatalf("round trip = %q %d %v", key, start, err)
	}
	if _, _, err := decodeWindowChangelogKey([]byte("short")); err == nil {
		t.Fatal("a 5-byte windowed key decoded")
	}
}

// FuzzEscaped checks that the escaped encoding round-trips, is prefix-free and keeps order,
// and that decoding arbitrary bytes never panics.
func FuzzEscaped(f *testing.F) {
	f.Add([]byte("a"), []byte("ab"))
	f.Add([]byte{0}, []byte{0, 0xff})
	f.Add([]byte{}, []byte{1})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ea, eb := appendEscaped(nil, a), appendEscaped(nil, b)
		got, rest, err := decodeEscaped(append(ea, 9))
		if err != nil || !bytes.Equal(got, a) || !bytes.Equal(rest, []byte{9}) {
			t.Fatalf("decode(escape(%q)) = %q, rest %q, %v", a, got, rest, err)
		}
		if cmp := bytes.Compare(a, b); cmp != bytes.Compare(ea, eb) {
			t.Fatalf("order of %q, %q not kept by escaping", a, b)
		}
		if !bytes.Equal(a, b) && (bytes.HasPrefix(ea, eb) || bytes.HasPrefix(eb, ea)) {
			t.Fatalf("escaped %q and %q are prefixes of each other", a, b)
		}
		_, _, _ = decodeEscaped(a) // must not panic
	})
}

// FuzzDecodeWindowChangelogKey checks that any changelog key either decodes or is refused.
func FuzzDecodeWindowChangelogKey(f *testing.F) {
	f.Add([]byte("k\x00\x00\x00\x00\x00\x00\x00\x01"))
	f.Add([]byte("short"))
	f.Fuzz(func(t *testing.T, k []byte) {
		key, start, err := decodeWindowChangelogKey(k)
		if err != nil {
			return
		}
		if again := appendWindowChangelogKey(nil, key, start); !bytes.Equal(again, k) {
			t.Fatalf("re-encoding %q gave %q", k, again)
		}
	})
}
