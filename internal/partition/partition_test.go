package partition

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMatchesFranzGo checks For against franz-go's Kafka-compatible key partitioner, which
// producers in tarn use, so records and lookups agree on where a key lives.
func TestMatchesFranzGo(t *testing.T) {
	p := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for _, n := range []int{1, 3, 7, 12, 64} {
		for i := 0; i < 2000; i++ {
			key := []byte(fmt.Sprintf("key-%d", i*7919))
			got := For(key, int32(n))
			want := p.Partition(&kgo.Record{Key: key}, n)
			if int(got) != want {
				t.Fatalf("For(%q, %d) = %d, franz-go says %d", key, n, got, want)
			}
		}
	}
}

// TestKnownValues pins values computed by Kafka's Java Utils.murmur2.
func TestKnownValues(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	} {
		if got := int32(murmur2([]byte(tc.in))); got != tc.want {
			t.Errorf("murmur2(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func FuzzFor(f *testing.F) {
	f.Add([]byte("k"), int32(3))
	f.Fuzz(func(t *testing.T, key []byte, n int32) {
		if n <= 0 {
			return
		}
		if p := For(key, n); p < 0 || p >= n {
			t.Fatalf("For(%q, %d) = %d, out of range", key, n, p)
		}
	})
}
