package cdc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header names carried by every record of a table topic.
const (
	// HeaderLSN is the commit LSN of the Postgres transaction (for snapshot rows and the
	// truncate markers that open a snapshot: the slot's consistent point).
	HeaderLSN = "lsn"
	// HeaderSeq is the record's position within its transaction (within the snapshot), from 0.
	HeaderSeq = "seq"
	// HeaderXid is the Postgres transaction id (absent on snapshot records).
	HeaderXid = "xid"
	// HeaderCommitTime is the commit time in RFC 3339 (the snapshot's start on snapshot records).
	HeaderCommitTime = "commit_time"
	// HeaderOp is one of the Op values.
	HeaderOp = "op"
)

// Op is the kind of change a record carries.
type Op string

// Ops, as written in HeaderOp.
const (
	OpSnapshot Op = "snapshot"
	OpInsert   Op = "insert"
	OpUpdate   Op = "update"
	OpDelete   Op = "delete"
	OpTruncate Op = "truncate"
)

// TruncateKey is the key of truncate markers. Kafka refuses records without a key on compacted
// topics, so the marker has a key that no row can have: Postgres text never contains a NUL
// byte, and composite keys are JSON, which escapes it.
var TruncateKey = []byte("\x00truncate")

// ErrNotCDC reports a record that lacks the headers the CDC source writes; use errors.Is.
var ErrNotCDC = errors.New("cdc: record is not from a CDC table topic")

// Position orders the records of a table topic: (commit LSN, sequence in transaction). After a
// restart in at-least-once mode a suffix of transactions may be written again; a consumer that
// skips every record whose Position is not after the last one it applied on that partition
// sees each change once, in order.
type Position struct {
	LSN LSN
	Seq uint64
}

// Less reports whether p comes before q.
func (p Position) Less(q Position) bool {
	return p.LSN < q.LSN || p.LSN == q.LSN && p.Seq < q.Seq
}

// String formats the position as "LSN#seq".
func (p Position) String() string { return p.LSN.String() + "#" + strconv.FormatUint(p.Seq, 10) }

func header(r *kgo.Record, name string) ([]byte, bool) {
	for _, h := range r.Headers {
		if h.Key == name {
			return h.Value, true
		}
	}
	return nil, false
}

// RecordLSN is the commit LSN of the transaction that wrote r.
func RecordLSN(r *kgo.Record) (LSN, error) {
	v, ok := header(r, HeaderLSN)
	if !ok {
		return 0, fmt.Errorf("%w: no %q header", ErrNotCDC, HeaderLSN)
	}
	return ParseLSN(string(v))
}

// RecordPosition is the (commit LSN, sequence) of r, by which consumers de-duplicate.
func RecordPosition(r *kgo.Record) (Position, error) {
	lsn, err := RecordLSN(r)
	if err != nil {
		return Position{}, err
	}
	v, ok := header(r, HeaderSeq)
	if !ok {
		return Position{}, fmt.Errorf("%w: no %q header", ErrNotCDC, HeaderSeq)
	}
	seq, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("%w: %q header %q: %w", ErrNotCDC, HeaderSeq, v, err)
	}
	return Position{LSN: lsn, Seq: seq}, nil
}

// RecordOp is the kind of change r carries.
func RecordOp(r *kgo.Record) (Op, error) {
	v, ok := header(r, HeaderOp)
	if !ok {
		return "", fmt.Errorf("%w: no %q header", ErrNotCDC, HeaderOp)
	}
	return Op(v), nil
}

// RecordCommitTime is the commit time of the transaction that wrote r.
func RecordCommitTime(r *kgo.Record) (time.Time, error) {
	v, ok := header(r, HeaderCommitTime)
	if !ok {
		return time.Time{}, fmt.Errorf("%w: no %q header", ErrNotCDC, HeaderCommitTime)
	}
	return time.Parse(time.RFC3339Nano, string(v))
}

// IsTruncate reports whether r is a truncate marker: the table was emptied at r's LSN, and a
// store applies it as a delete of every key of the partition that it holds for the table.
func IsTruncate(r *kgo.Record) bool {
	op, _ := header(r, HeaderOp)
	return string(op) == string(OpTruncate) && bytes.Equal(r.Key, TruncateKey)
}

// IsDelete reports whether r is a tombstone: the row with key r.Key was deleted.
func IsDelete(r *kgo.Record) bool { return r.Value == nil && !IsTruncate(r) }

// Row is a decoded row value: each column's JSON as written (see the package documentation
// for the mapping of Postgres types), so that numbers keep every digit.
type Row map[string]json.RawMessage

// DecodeRow decodes a record value into its columns. Tombstones and truncate markers have no
// row; DecodeRow returns (nil, nil) for a nil value.
func DecodeRow(value []byte) (Row, error) {
	if value == nil {
		return nil, nil
	}
	var row Row
	if err := json.Unmarshal(value, &row); err != nil {
		return nil, fmt.Errorf("cdc: row value is not a JSON object: %w", err)
	}
	return row, nil
}

// EncodeKey builds the key of a row from the Postgres text form of its key columns, in column
// order. One column: the text itself (so an HTTP path or a stream's key can name the row
// directly). Several columns: a JSON array of the texts, e.g. ["42","2024-05-01"]. Tables keyed
// by REPLICA IDENTITY FULL always use the array form, with null for NULL (see EncodeKeyNullable).
func EncodeKey(parts ...string) []byte {
	if len(parts) == 1 {
		return []byte(parts[0])
	}
	return encodeKeyArray(parts)
}

// EncodeKeyNullable builds the key of a row of a table keyed by all its columns (REPLICA
// IDENTITY FULL, no primary key): a JSON array of the texts, nil entries for NULL.
func EncodeKeyNullable(parts []*string) []byte {
	return encodeKeyArray(parts)
}

// encodeKeyArray is the one canonical JSON form of a composite key: compact, and without Go's
// HTML escaping (json.Marshal writes & < > as \u0026 \u003c \u003e), so that a client that
// writes the key as plain JSON, ["a&b","1"], names the same row as tarn does.
func encodeKeyArray(parts any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(parts) // a slice of strings always encodes
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// DecodeKey splits a composite key built by EncodeKey into its parts; a single-column key is
// returned as one part when the table has one key column (n == 1).
func DecodeKey(key []byte, n int) ([]string, error) {
	if n == 1 {
		return []string{string(key)}, nil
	}
	var parts []string
	if err := json.Unmarshal(key, &parts); err != nil {
		return nil, fmt.Errorf("cdc: composite key %q is not a JSON array of strings: %w", key, err)
	}
	if len(parts) != n {
		return nil, fmt.Errorf("cdc: composite key %q has %d parts, want %d", key, len(parts), n)
	}
	return parts, nil
}
