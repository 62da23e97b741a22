package state

import (
	"fmt"
	"testing"
)

// TestKeyFilterHasNoFalseNegatives adds keys across several growths of the filter and checks
// that every one is reported as possibly present, and that few unknown keys are.
func TestKeyFilterHasNoFalseNegatives(t *testing.T) {
	f := newKeyFilter()
	const n = 10 * firstFilterKeys
	for i := range n {
		f.add(fmt.Appendf(nil, "key-%d", i))
	}
	if chain := *f.chain.Load(); len(chain) < 3 {
		t.Fatalf("%d keys made %d filters, want growth past the first", n, len(chain))
	}
	for i := range n {
		if !f.mayContain(fmt.Appendf(nil, "key-%d", i)) {
			t.Fatalf("key-%d was added but the filter says absent", i)
		}
	}
	falsePositives := 0
	for i := range n {
		if f.mayContain(fmt.Appendf(nil, "other-%d", i)) {
			falsePositives++
		}
	}
	// About 0.3% per filter of the chain; 3% would mean the sizing is wrong.
	if rate := float64(falsePositives) / n; rate > 0.03 {
		t.Errorf("false positive rate %.4f over %d filters, want under 0.03", rate, len(*f.chain.Load()))
	}
}

// TestKeyFilterOfNilMayContainAll: a partition too large to fill has no filter, and every
// key goes to Pebble.
func TestKeyFilterOfNilMayContainAll(t *testing.T) {
	var f *keyFilter
	f.add([]byte("k"))
	if !f.mayContain([]byte("anything")) {
		t.Fatal("a nil filter said absent")
	}
}
