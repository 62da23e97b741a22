package cdc

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/tarnhq/tarn/cdc/internal/pgjson"
	"github.com/tarnhq/tarn/internal/partition"
	"github.com/twmb/franz-go/pkg/kgo"
)

// value is one column of a row: Postgres text, NULL, or JSON already converted (a TOAST value
// filled from the previous row).
type value struct {
	text []byte
	null bool
	json json.RawMessage
}

// appendRow writes a row as a JSON object of its columns.
func appendRow(dst []byte, cols []column, vals []value) ([]byte, error) {
	dst = append(dst, '{')
	for i, c := range cols {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = pgjson.AppendString(dst, []byte(c.name))
		dst = append(dst, ':')
		v := vals[i]
		switch {
		case v.null:
			dst = append(dst, "null"...)
		case v.json != nil:
			dst = append(dst, v.json...)
		default:
			var err error
			if dst, err = c.typ.Append(dst, v.text); err != nil {
				return nil, fmt.Errorf("column %s: %w", c.name, err)
			}
		}
	}
	return append(dst, '}'), nil
}

// keyOf builds a row's key (see EncodeKey) from the key columns keyIdx, in column order.
func keyOf(keyIdx []int, fullKey bool, cols []column, vals []value) ([]byte, error) {
	if fullKey {
		parts := make([]*string, len(keyIdx))
		for i, k := range keyIdx {
			switch v := vals[k]; {
			case v.null:
			case v.json != nil:
				return nil, fmt.Errorf("key column %s is an unchanged TOAST value", cols[k].name)
			default:
				parts[i] = new(string(v.text))
			}
		}
		return EncodeKeyNullable(parts), nil
	}
	parts := make([]string, len(keyIdx))
	for i, k := range keyIdx {
		v := vals[k]
		if v.null || v.json != nil {
			return nil, fmt.Errorf("key column %s has no value in the change", cols[k].name)
		}
		parts[i] = string(v.text)
	}
	return EncodeKey(parts...), nil
}

// txnHeaders are the header values shared by all records of one transaction.
type txnHeaders struct {
	lsn, xid, commitTime []byte
}

func newTxnHeaders(lsn LSN, xid uint32, commit time.Time) txnHeaders {
	h := txnHeaders{lsn: []byte(lsn.String()), commitTime: []byte(commit.UTC().Format(time.RFC3339Nano))}
	if xid != 0 {
		h.xid = []byte(strconv.FormatUint(uint64(xid), 10))
	}
	return h
}

func (h txnHeaders) record(topic string, partitions int32, key, val []byte, op Op, seq uint64) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, 5)
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderLSN, Value: h.lsn},
		kgo.RecordHeader{Key: HeaderSeq, Value: strconv.AppendUint(nil, seq, 10)},
		kgo.RecordHeader{Key: HeaderCommitTime, Value: h.commitTime},
		kgo.RecordHeader{Key: HeaderOp, Value: []byte(op)},
	)
	if h.xid != nil {
		hs = append(hs, kgo.RecordHeader{Key: HeaderXid, Value: h.xid})
	}
	return &kgo.Record{Topic: topic, Partition: partition.For(key, partitions), Key: key, Value: val, Headers: hs}
}

// truncateMarkers are the records that empty a table: one per partition, at the same position.
func (h txnHeaders) truncateMarkers(t *table, seq *uint64) []*kgo.Record {
	rs := make([]*kgo.Record, t.partitions)
	for p := range rs {
		r := h.record(t.topic, t.partitions, TruncateKey, nil, OpTruncate, *seq)
		r.Partition = int32(p)
		rs[p] = r
		*seq++
	}
	return rs
}
