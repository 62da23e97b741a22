package state

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// keyFilter remembers, as a chain of Bloom filters, every data key written to one store
// partition since this process first opened it, so that a Get of a key that was never written
// answers "absent" without asking Pebble. Such misses are the common case of aggregations
// that keep meeting new keys or new windows, and a Pebble miss walks the batch, the memtables
// and every level (about 1–3 µs), where the filter costs a hash and a few cache lines.
//
// It has no false negatives as long as every write of a data key is added before Pebble can
// show it: [Txn] adds at staging, [DB.Restore] before its batch commits, and the first
// handle of a partition fills it from the keys already on disk ([DB.register]). Deletes and
// range deletes leave their keys in: a false positive only costs the Pebble read it would have
// made anyway. It is safe for concurrent use.
type keyFilter struct {
	seed  maphash.Seed
	mu    sync.Mutex                     // serializes growth
	chain atomic.Pointer[[]*bloomFilter] // oldest first; the last one takes new keys
	added atomic.Int64                   // keys added to the last filter
	full  atomic.Bool                    // past maxFilterKeys: every key may be present
}

const (
	// firstFilterKeys is the capacity of a partition's first Bloom filter; each next one
	// doubles it, so a partition of n keys has about log2(n/firstFilterKeys) filters.
	firstFilterKeys = 1 << 14
	// maxFilterKeys bounds a partition's filter memory (~12 bits a key, ~200 MB at the
	// bound); past it the filter says "maybe" to every key and Gets go to Pebble.
	maxFilterKeys = 1 << 27
	// fillScanLimit is how many existing keys the first handle of a non-empty partition
	// reads to fill its filter; a larger partition gets no filter.
	fillScanLimit = 1 << 21
	bitsPerKey    = 12
	probes        = 7 // k for 12 bits a key: about 0.3% false positives per filter
)

// bloomFilter is one fixed-size Bloom filter; bits are set with atomic ORs.
type bloomFilter struct {
	words []atomic.Uint64
	mask  uint64 // number of bits - 1 (a power of two)
	keys  int64  // capacity
}

func newBloomFilter(keys int64) *bloomFilter {
	nbits := uint64(64)
	for nbits < uint64(keys)*bitsPerKey {
		nbits <<= 1
	}
	return &bloomFilter{words: make([]atomic.Uint64, nbits/64), mask: nbits - 1, keys: keys}
}

// add sets the key's bits: probes positions by double hashing of one 64-bit hash.
func (b *bloomFilter) add(h uint64) {
	h1, h2 := h, h>>32|1
	for i := uint64(0); i < probes; i++ {
		bit := (h1 + i*h2) & b.mask
		b.words[bit/64].Or(1 << (bit % 64))
	}
}

func (b *bloomFilter) has(h uint64) bool {
	h1, h2 := h, h>>32|1
	for i := uint64(0); i < probes; i++ {
		bit := (h1 + i*h2) & b.mask
		if b.words[bit/64].Load()&(1<<(bit%64)) == 0 {
			return false
		}
	}
	return true
}

func newKeyFilter() *keyFilter {
	f := &keyFilter{seed: maphash.MakeSeed()}
	chain := []*bloomFilter{newBloomFilter(firstFilterKeys)}
	f.chain.Store(&chain)
	return f
}

// add records that key may be present.
func (f *keyFilter) add(key []byte) {
	if f == nil || f.full.Load() {
		return
	}
	chain := *f.chain.Load()
	last := chain[len(chain)-1]
	last.add(maphash.Bytes(f.seed, key))
	if f.added.Add(1) > last.keys {
		f.grow(last)
	}
}

// grow starts a filter twice the size of last, unless another add did already.
func (f *keyFilter) grow(last *bloomFilter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	chain := *f.chain.Load()
	if chain[len(chain)-1] != last {
		return
	}
	total := int64(0)
	for _, b := range chain {
		total += b.keys
	}
	if total >= maxFilterKeys {
		f.full.Store(true)
		return
	}
	next := append(append([]*bloomFilter(nil), chain...), newBloomFilter(2*last.keys))
	f.chain.Store(&next)
	f.added.Store(0)
}

// mayContain reports false only for a key that was never added. A nil filter (a partition
// too large to fill) may contain every key.
func (f *keyFilter) mayContain(key []byte) bool {
	if f == nil || f.full.Load() {
		return true
	}
	h := maphash.Bytes(f.seed, key)
	for _, b := range *f.chain.Load() {
		if b.has(h) {
			return true
		}
	}
	return false
}

// fillKeyFilter returns a filter holding every data key of the partition with namespace ns
// that is on disk, or nil when there are more than fillScanLimit of them.
func fillKeyFilter(r pebble.Reader, ns []byte) (*keyFilter, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: ns, UpperBound: prefixEnd(ns)})
	if err != nil {
		return nil, err
	}
	f := newKeyFilter()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n > fillScanLimit {
			return nil, it.Close()
		}
		f.add(it.Key())
	}
	return f, it.Close()
}
