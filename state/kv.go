package state

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// KV is a handle on one key-value store partition. Reads take a [Reader] (the DB, a
// Snapshot or a Txn) and writes a [*Txn], so that which state a read sees is always explicit.
// Keys are ordered bytewise. A KV is safe for concurrent use.
type KV struct {
	p *part
}

// KV returns the handle of a key-value store partition, creating nothing: a store partition
// without data is empty.
func (db *DB) KV(id ID) (*KV, error) {
	p, err := db.register(id, storeDef{kind: kindKV})
	if err != nil {
		return nil, err
	}
	return &KV{p: p}, nil
}

// ID names the store partition.
func (s *KV) ID() ID { return s.p.id }

func (s *KV) handle() *part { return s.p }

// Offset returns the changelog offset whose effects r contains (the last applied changelog
// record), and false when nothing was applied yet.
func (s *KV) Offset(r Reader) (int64, bool, error) {
	return s.p.offset(r.pebbleReader())
}

// Get returns a copy of the value of key, and false when key is absent.
func (s *KV) Get(r Reader, key []byte) ([]byte, bool, error) {
	return s.p.get(r, s.p.dataKey(key))
}

// Range iterates the keys in [start, end) in order; a nil end means to the last key.
func (s *KV) Range(r Reader, start, end []byte) (*Iter, error) {
	upper := prefixEnd(s.p.data)
	if end != nil {
		upper = s.p.dataKey(end)
	}
	return s.iter(r, s.p.dataKey(start), upper)
}

// Prefix iterates the keys that start with prefix, in order.
func (s *KV) Prefix(r Reader, prefix []byte) (*Iter, error) {
	lower := s.p.dataKey(prefix)
	return s.iter(r, lower, prefixEnd(lower))
}

func (s *KV) iter(r Reader, lower, upper []byte) (*Iter, error) {
	it, err := r.pebbleReader().NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("state: %s: new iterator: %w", s.p.id, err)
	}
	return &Iter{it: it, strip: len(s.p.data)}, nil
}

// Put sets key to value in t; t's reads see it at once, other readers after t.Apply. A nil
// value is stored as an empty one (deletes are Delete).
func (s *KV) Put(t *Txn, key, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	return t.write(s.p, t.storeKey(s.p, key), key, value)
}

// Delete removes key in t (a tombstone in the changelog).
func (s *KV) Delete(t *Txn, key []byte) error {
	return t.write(s.p, t.storeKey(s.p, key), key, nil)
}

// Iter walks store keys in order:
//
//	for it.Next() { use(it.Key(), it.Value()) }
//	err := it.Close()
//
// Key and Value are valid until the next call to Next.
type Iter struct {
	it         *pebble.Iterator
	strip      int
	positioned bool
}

// Next moves to the first, then to the next key, and reports whether there is one.
func (i *Iter) Next() bool {
	if !i.positioned {
		i.positioned = true
		return i.it.First()
	}
	return i.it.Next()
}

// Key is the store key at the current position.
func (i *Iter) Key() []byte { return i.it.Key()[i.strip:] }

// Value is the value at the current position; a read error ends the iteration and is
// returned by Err and Close.
func (i *Iter) Value() []byte {
	v, _ := i.it.ValueAndErr()
	return v
}

// Err returns the error that ended the iteration, if any.
func (i *Iter) Err() error { return i.it.Error() }

// Close releases the iterator and returns the error that ended the iteration, if any.
func (i *Iter) Close() error {
	err := i.it.Error()
	if cerr := i.it.Close(); err == nil {
		err = cerr
	}
	return err
}
