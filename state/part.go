package state

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// part is what every store handle knows about its partition: where its keys live and which
// changelog partition logs it.
type part struct {
	db    *DB
	id    ID
	topic string
	kind  byte
	// filter holds every data key written since the namespace was first opened; nil when
	// the namespace was too large to fill one.
	filter *keyFilter
	// ns is the partition prefix; data is ns+kind, the prefix of every data key.
	ns, data          []byte
	metaOffsetKey     []byte
	metaStreamTimeKey []byte
}

func newPart(db *DB, id ID, kind byte) *part {
	ns := partitionPrefix(id)
	withKind := func(k ...byte) []byte {
		b := append(append([]byte(nil), ns...), k...)
		return b
	}
	return &part{
		db:                db,
		id:                id,
		topic:             id.Topic(),
		kind:              kind,
		ns:                ns,
		data:              withKind(kind),
		metaOffsetKey:     withKind(kindMeta, metaOffset),
		metaStreamTimeKey: withKind(kindMeta, metaStreamTime),
	}
}

// dataKey returns data | suffix in a fresh slice.
func (p *part) dataKey(suffix []byte) []byte {
	b := make([]byte, 0, len(p.data)+len(suffix))
	return append(append(b, p.data...), suffix...)
}

// offset reads the applied changelog offset.
func (p *part) offset(r pebble.Reader) (int64, bool, error) {
	v, ok, err := getCopy(r, p.metaOffsetKey)
	if err != nil || !ok {
		return -1, false, err
	}
	if len(v) != 8 {
		return -1, false, fmt.Errorf("state: %s: applied offset record has %d bytes, want 8; drop the partition (DropPartition) and restore", p.id, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

// get returns a copy of the value of the data key k, asking Pebble only when k may have been
// written.
func (p *part) get(r Reader, k []byte) ([]byte, bool, error) {
	if !p.filter.mayContain(k) {
		return nil, false, nil
	}
	return getCopy(r.pebbleReader(), k)
}

// setOffset writes the applied changelog offset into b.
func (p *part) setOffset(b *pebble.Batch, off int64) error {
	return b.Set(p.metaOffsetKey, binary.BigEndian.AppendUint64(nil, uint64(off)), nil)
}

// Store is a handle on a store partition that [DB.Restore] can restore: a [*KV] or a
// [*Window].
type Store interface {
	// ID names the store partition.
	ID() ID
	handle() *part
}
