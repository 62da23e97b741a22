package serve

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Position is how far a view has got: per input partition, the offset of the next record it
// will apply (Kafka's committed-offset convention: the record at offset o is applied when
// Offsets[p] > o), and for CDC-fed views the Postgres LSN it has applied.
//
// Its token form (the Tarn-Position header, SSE event ids, the after= parameter) is opaque to
// clients. It is the unpadded base64url encoding of:
//
//	version byte (1) | flags byte (bit 0: LSN present) | [uvarint LSN] |
//	uvarint count | count × (uvarint partition delta, uvarint offset)
//
// with partitions ascending and each delta taken from the previous partition (the first from
// zero, later ones at least 1), so every position has exactly one token.
type Position struct {
	Offsets map[int32]int64
	LSN     LSN
}

// ErrBadPosition reports an unreadable position, cursor or offsets list. Test with errors.Is.
var ErrBadPosition = errors.New("serve: malformed position")

const positionVersion = 1

// IsZero reports whether p says nothing.
func (p Position) IsZero() bool { return len(p.Offsets) == 0 && p.LSN == 0 }

// Reached reports whether p is at or past target on every partition target names and on the
// LSN; a partition missing from p has not reached anything.
func (p Position) Reached(target Position) bool {
	if p.LSN < target.LSN {
		return false
	}
	for part, off := range target.Offsets {
		got, ok := p.Offsets[part]
		if !ok || got < off {
			return false
		}
	}
	return true
}

// Merge returns the partition-wise maximum of p and q (and the larger LSN). Positions of
// disjoint partition sets, such as those of two instances, merge into the whole view's.
func (p Position) Merge(q Position) Position {
	out := Position{LSN: max(p.LSN, q.LSN), Offsets: make(map[int32]int64, len(p.Offsets)+len(q.Offsets))}
	maps.Copy(out.Offsets, p.Offsets)
	for part, off := range q.Offsets {
		if cur, ok := out.Offsets[part]; !ok || off > cur {
			out.Offsets[part] = off
		}
	}
	return out
}

// Join combines the positions of disjoint partition sets read at about the same time, such as
// the parts of one scan page that several instances answered: the offsets of both, and the
// smaller LSN, since each vouches for its own partitions only (one without an LSN makes the
// whole's unknown). [Position.Merge] is for one set of partitions seen at two times.
func (p Position) Join(q Position) Position {
	out := p.Merge(q)
	out.LSN = min(p.LSN, q.LSN)
	return out
}

// Only returns p restricted to the given partitions.
func (p Position) Only(parts []int32) Position {
	out := Position{LSN: p.LSN}
	for _, part := range parts {
		if off, ok := p.Offsets[part]; ok {
			if out.Offsets == nil {
				out.Offsets = make(map[int32]int64, len(parts))
			}
			out.Offsets[part] = off
		}
	}
	return out
}

// Token is the opaque, canonical text form of p.
func (p Position) Token() string {
	return p.token(p.partitions())
}

// partitions returns the partitions of p, ascending.
func (p Position) partitions() []int32 {
	parts := make([]int32, 0, len(p.Offsets))
	for part := range p.Offsets {
		parts = append(parts, part)
	}
	slices.Sort(parts)
	return parts
}

func (p Position) token(parts []int32) string {
	b := make([]byte, 0, 4+len(parts)*6)
	b = append(b, positionVersion, 0)
	if p.LSN != 0 {
		b[1] = 1
		b = binary.AppendUvarint(b, uint64(p.LSN))
	}
	b = binary.AppendUvarint(b, uint64(len(parts)))
	prev := int32(0)
	for _, part := range parts {
		b = binary.AppendUvarint(b, uint64(part-prev))
		b = binary.AppendUvarint(b, uint64(max(p.Offsets[part], 0)))
		prev = part
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParsePosition reads a token made by [Position.Token]. Any other input, including
// non-canonical encodings, is an error wrapping ErrBadPosition.
func ParsePosition(token string) (Position, error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return Position{}, fmt.Errorf("%w: not unpadded base64url", ErrBadPosition)
	}
	d := decoder{b: b}
	p, err := d.position()
	if err != nil {
		return Position{}, err
	}
	if p.Token() != token {
		return Position{}, fmt.Errorf("%w: not in canonical form", ErrBadPosition)
	}
	return p, nil
}

// decoder reads uvarints from a token, remembering the first problem.
type decoder struct{ b []byte }

func (d *decoder) uvarint(what string, limit uint64) (uint64, error) {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		return 0, fmt.Errorf("%w: truncated %s", ErrBadPosition, what)
	}
	if v > limit {
		return 0, fmt.Errorf("%w: %s out of range", ErrBadPosition, what)
	}
	d.b = d.b[n:]
	return v, nil
}

func (d *decoder) position() (Position, error) {
	if len(d.b) < 2 || d.b[0] != positionVersion || d.b[1]&^1 != 0 {
		return Position{}, fmt.Errorf("%w: unknown version or flags", ErrBadPosition)
	}
	var p Position
	hasLSN := d.b[1] == 1
	d.b = d.b[2:]
	if hasLSN {
		lsn, err := d.uvarint("lsn", math.MaxUint64)
		if err != nil {
			return Position{}, err
		}
		p.LSN = LSN(lsn)
	}
	// Each partition takes at least two bytes, which bounds the allocation below.
	n, err := d.uvarint("partition count", uint64(len(d.b)/2))
	if err != nil {
		return Position{}, err
	}
	if n > 0 {
		p.Offsets = make(map[int32]int64, n)
	}
	part := uint64(0)
	for i := range n {
		delta, err := d.uvarint("partition", math.MaxInt32)
		if err != nil {
			return Position{}, err
		}
		if i > 0 && delta == 0 {
			return Position{}, fmt.Errorf("%w: partitions not ascending", ErrBadPosition)
		}
		if part += delta; part > math.MaxInt32 {
			return Position{}, fmt.Errorf("%w: partition out of range", ErrBadPosition)
		}
		off, err := d.uvarint("offset", math.MaxInt64)
		if err != nil {
			return Position{}, err
		}
		p.Offsets[int32(part)] = int64(off)
	}
	if len(d.b) != 0 {
		return Position{}, fmt.Errorf("%w: trailing bytes", ErrBadPosition)
	}
	return p, nil
}

// positionJSON is the body form of a Position; the token repeats it for clients that resume.
type positionJSON struct {
	Offsets map[string]int64 `json:"offsets"`
	LSN     string           `json:"lsn,omitempty"`
	Token   string           `json:"token"`
}

// MarshalJSON writes {"offsets":{"<partition>":offset,...},"lsn":"X/Y","token":"..."}, the
// partitions in numeric order. It is written by hand since every response carries one.
func (p Position) MarshalJSON() ([]byte, error) {
	b, _ := p.appendJSON(make([]byte, 0, 32+24*len(p.Offsets)))
	return b, nil
}

// appendJSON appends the JSON form of p and returns the token too, for the header.
func (p Position) appendJSON(b []byte) ([]byte, string) {
	parts := p.partitions()
	tok := p.token(parts)
	b = append(b, `{"offsets":{`...)
	for i, part := range parts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = strconv.AppendInt(b, int64(part), 10)
		b = append(b, `":`...)
		b = strconv.AppendInt(b, p.Offsets[part], 10)
	}
	b = append(b, '}')
	if p.LSN != 0 {
		b = append(b, `,"lsn":"`...)
		b = append(b, p.LSN.String()...)
		b = append(b, '"')
	}
	b = append(b, `,"token":"`...)
	b = append(b, tok...)
	return append(b, `"}`...), tok
}

// UnmarshalJSON reads the form MarshalJSON writes, trusting the token.
func (p *Position) UnmarshalJSON(b []byte) error {
	var j positionJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	got, err := ParsePosition(j.Token)
	if err != nil {
		return err
	}
	*p = got
	return nil
}

// InputOffsets names records on the Kafka topics a view reads: per topic, per partition, the
// offset after the last record waited for (the committed-offset convention of [Position]).
type InputOffsets map[string]map[int32]int64

// maxTopicName is Kafka's limit on the length of a topic name.
const maxTopicName = 249

// ParseMinOffsets reads the min_offsets parameter, a list of items separated by commas, each
// either "partition:offset" (an offset of the view's own position, as an answer's position
// reported it) or "topic:partition:offset" (a record a producer wrote on an input topic of
// the view, as its acknowledgement named it). It returns the position at which the view has
// reached the first kind and the input offsets after the second kind (offset+1, see
// [Position]); either may be empty, not both. Kafka topic names have no ':', which keeps the
// two forms apart.
func ParseMinOffsets(s string) (Position, InputOffsets, error) {
	if s == "" {
		return Position{}, nil, fmt.Errorf("%w: empty offsets list", ErrBadPosition)
	}
	items := strings.Split(s, ",")
	if len(items) > maxPartitionsParam {
		return Position{}, nil, fmt.Errorf("%w: more than %d partitions", ErrBadPosition, maxPartitionsParam)
	}
	var p Position
	var in InputOffsets
	for _, item := range items {
		fields := strings.Split(item, ":")
		if len(fields) != 2 && len(fields) != 3 {
			return Position{}, nil, fmt.Errorf("%w: %q is not partition:offset or topic:partition:offset", ErrBadPosition, item)
		}
		part, off, err := partitionOffset(fields[len(fields)-2], fields[len(fields)-1])
		if err != nil {
			return Position{}, nil, err
		}
		if len(fields) == 2 {
			if _, dup := p.Offsets[part]; dup {
				return Position{}, nil, fmt.Errorf("%w: partition %d given twice", ErrBadPosition, part)
			}
			if p.Offsets == nil {
				p.Offsets = map[int32]int64{}
			}
			p.Offsets[part] = off + 1
			continue
		}
		topic := fields[0]
		if err := checkTopicName(topic); err != nil {
			return Position{}, nil, err
		}
		if _, dup := in[topic][part]; dup {
			return Position{}, nil, fmt.Errorf("%w: %s partition %d given twice", ErrBadPosition, topic, part)
		}
		if in == nil {
			in = InputOffsets{}
		}
		if in[topic] == nil {
			in[topic] = map[int32]int64{}
		}
		in[topic][part] = off + 1
	}
	return p, in, nil
}

// partitionOffset reads the partition and offset of a min_offsets item.
func partitionOffset(ps, os string) (int32, int64, error) {
	part, err := strconv.ParseInt(ps, 10, 32)
	if err != nil || part < 0 {
		return 0, 0, fmt.Errorf("%w: partition %q is not a non-negative 32-bit integer", ErrBadPosition, ps)
	}
	off, err := strconv.ParseInt(os, 10, 64)
	if err != nil || off < 0 || off == math.MaxInt64 {
		return 0, 0, fmt.Errorf("%w: offset %q is not a non-negative 63-bit integer", ErrBadPosition, os)
	}
	return int32(part), off, nil
}

// checkTopicName applies Kafka's rules for topic names, so that a typo is named as such
// rather than as a topic the view does not read.
func checkTopicName(t string) error {
	if t == "" || len(t) > maxTopicName || t == "." || t == ".." {
		return fmt.Errorf("%w: %q is not a Kafka topic name", ErrBadPosition, t)
	}
	for _, c := range []byte(t) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q is not a Kafka topic name", ErrBadPosition, t)
		}
	}
	return nil
}

// LSN is a Postgres write-ahead log position; 0 means none.
type LSN uint64

// String formats l as Postgres does: two hexadecimal halves, "16/B374D848".
func (l LSN) String() string {
	return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l))
}

// ParseLSN reads the "X/Y" form of an LSN.
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || hi == "" || lo == "" || len(hi) > 8 || len(lo) > 8 {
		return 0, fmt.Errorf("%w: LSN %q is not of the form X/Y in hexadecimal", ErrBadPosition, s)
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%w: LSN %q is not of the form X/Y in hexadecimal", ErrBadPosition, s)
	}
	return LSN(h<<32 | l), nil
}
