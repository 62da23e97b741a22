package outputs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Kind says how a query's outputs compare.
type Kind int

const (
	// Stream outputs compare as multisets of (key, value): every record counts.
	Stream Kind = iota + 1
	// Table outputs compare as the last value of each key; a nil value (tombstone) deletes
	// the key. Intermediate updates depend on caching and do not count.
	Table
)

func (k Kind) String() string {
	switch k {
	case Stream:
		return "stream"
	case Table:
		return "table"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// KindOf returns the kind of query's output, as bench/README.md's table of queries gives it.
func KindOf(query string) (Kind, error) {
	switch query {
	case "q0", "q1", "q2", "q3", "q8", "q20":
		return Stream, nil
	case "q5", "q7", "q17", "q18":
		return Table, nil
	}
	return 0, fmt.Errorf("%w: unknown query %q; bench/README.md lists q0 q1 q2 q3 q5 q7 q8 q17 q18 q20", ErrConfig, query)
}

// digest identifies a key and a canonical value; 128 bits make a collision among billions of
// records improbable beyond concern.
type digest [16]byte

type tableEntry struct {
	value     digest
	partition int32
}

// Summary is what comparison needs of one output topic.
type Summary struct {
	Topic   string
	Kind    Kind
	Records int64
	stream  map[digest]int64
	table   map[string]tableEntry
	// split are table keys met in more than one partition.
	split map[string]bool
}

// NewSummary returns an empty summary of topicName's output of kind k.
func NewSummary(topicName string, k Kind) *Summary {
	return &Summary{Topic: topicName, Kind: k, stream: map[digest]int64{}, table: map[string]tableEntry{}, split: map[string]bool{}}
}

// Summarize reads topicName with [Read] into a summary of kind k.
func Summarize(ctx context.Context, brokers []string, topicName string, k Kind, opts ...kgo.Opt) (*Summary, error) {
	s := NewSummary(topicName, k)
	if err := Read(ctx, brokers, topicName, s.Add, opts...); err != nil {
		return nil, err
	}
	return s, nil
}

// Add folds one output record in; records of one partition must come in offset order.
func (s *Summary) Add(r *kgo.Record) error {
	s.Records++
	switch s.Kind {
	case Stream:
		s.stream[sum(r.Key, r.Value)]++
	case Table:
		key := string(r.Key)
		if e, ok := s.table[key]; ok && e.partition != r.Partition {
			s.split[key] = true
		}
		if r.Value == nil {
			delete(s.table, key)
			return nil
		}
		s.table[key] = tableEntry{value: sum(nil, r.Value), partition: r.Partition}
	default:
		return fmt.Errorf("%w: summary of %s has no kind", ErrConfig, s.Topic)
	}
	return nil
}

// sum digests a key and the canonical form of a value.
func sum(key, value []byte) digest {
	h := sha256.New()
	h.Write(key)
	h.Write([]byte{0})
	h.Write(Canonical(value))
	var d digest
	copy(d[:], h.Sum(nil))
	return d
}

// Canonical returns value as JSON with object keys sorted, no spaces, and every number
// written as the shortest form of its float64 value, so that 1, 1.0 and 1e0 are one value.
// Integers beyond 2^53 would lose precision; Nexmark's are below. A value that is not JSON
// is returned as is behind a 0xff byte, which no JSON text starts with; nil stays nil.
func Canonical(value []byte) []byte {
	if value == nil {
		return nil
	}
	var v any
	if err := json.Unmarshal(value, &v); err != nil {
		return append([]byte{0xff}, value...)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return append([]byte{0xff}, value...)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// Side describes one summary in a [Verdict].
type Side struct {
	Topic   string `json:"topic"`
	Records int64  `json:"records"`
	// Distinct counts distinct (key, value) pairs of a stream output, keys of a table.
	Distinct int `json:"distinct"`
}

// Verdict is the result of [Compare].
type Verdict struct {
	Kind  string `json:"kind"`
	Equal bool   `json:"equal"`
	A     Side   `json:"a"`
	B     Side   `json:"b"`
	// OnlyA and OnlyB count records (stream) or keys (table) found on one side only.
	OnlyA int64 `json:"onlyA"`
	OnlyB int64 `json:"onlyB"`
	// Differ counts table keys whose last values differ.
	Differ int64 `json:"differ"`
	// Split counts table keys met in more than one partition, summed over both sides.
	Split int64 `json:"split"`
	// Examples are up to 5 table keys that differ, in order.
	Examples []string `json:"examples,omitempty"`
}

// Compare compares two summaries of one kind.
func Compare(a, b *Summary) (Verdict, error) {
	if a.Kind != b.Kind {
		return Verdict{}, fmt.Errorf("%w: %s is a %s summary, %s a %s one", ErrConfig, a.Topic, a.Kind, b.Topic, b.Kind)
	}
	v := Verdict{Kind: a.Kind.String(), A: side(a), B: side(b)}
	if a.Kind == Stream {
		v.OnlyA, v.OnlyB = excess(a.stream, b.stream), excess(b.stream, a.stream)
	} else {
		compareTables(&v, a, b)
	}
	v.Equal = v.OnlyA == 0 && v.OnlyB == 0 && v.Differ == 0 && v.Split == 0
	return v, nil
}

func side(s *Summary) Side {
	n := len(s.stream)
	if s.Kind == Table {
		n = len(s.table)
	}
	return Side{Topic: s.Topic, Records: s.Records, Distinct: n}
}

// excess counts the records of multiset a beyond those of b.
func excess(a, b map[digest]int64) int64 {
	var n int64
	for d, c := range a {
		n += max(c-b[d], 0)
	}
	return n
}

func compareTables(v *Verdict, a, b *Summary) {
	var bad []string
	for k, ea := range a.table {
		eb, ok := b.table[k]
		switch {
		case !ok:
			v.OnlyA++
		case ea.value != eb.value:
			v.Differ++
		default:
			continue
		}
		bad = append(bad, k)
	}
	for k := range b.table {
		if _, ok := a.table[k]; !ok {
			v.OnlyB++
			bad = append(bad, k)
		}
	}
	for k := range a.split {
		bad = append(bad, k)
	}
	for k := range b.split {
		if !a.split[k] {
			bad = append(bad, k)
		}
	}
	v.Split = int64(len(a.split) + len(b.split))
	slices.Sort(bad)
	bad = slices.Compact(bad)
	v.Examples = bad[:min(5, len(bad))]
}
