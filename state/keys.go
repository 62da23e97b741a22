package state

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"
)

// Pebble key layout. Every store partition is a namespace:
//
//	's' | app 0x00 | view 0x00 | version u32 | store 0x00 | partition u32 | kind | ...
//
// Names cannot contain 0x00 (topic.ValidateName), so the 0x00 separators make the layout
// prefix-free: the keys of one version of a view are exactly the keys with that version's
// prefix, and dropping a version or a partition is one range delete.
//
// Within a namespace:
//
//	kindMeta  'm' | 'o'                   → applied changelog offset (u64)
//	kindMeta  'm' | 't'                   → stream time of a windowed store (ms, i64)
//	kindKV    'k' | key                   → value
//	kindWin   'w' | segment | esc(key) | start → value
//
// Windowed keys lead with the segment so that retention deletes whole segments with one range
// delete; the key is escaped (order-preserving, terminated) so that one key's windows are
// contiguous within a segment and ordered by start.
const (
	keyspaceStores = 's'
	kindMeta       = 'm'
	kindKV         = 'k'
	kindWin        = 'w'
	metaOffset     = 'o'
	metaStreamTime = 't'
)

// errShortWindowKey is the reason for a windowed changelog key too short to hold a start.
var errShortWindowKey = errors.New("windowed changelog key is shorter than its 8-byte window start")

// versionPrefix is the prefix of every key of one version of a view.
func versionPrefix(app, view string, version int) []byte {
	b := make([]byte, 0, 1+len(app)+1+len(view)+1+4)
	b = append(b, keyspaceStores)
	b = append(b, app...)
	b = append(b, 0)
	b = append(b, view...)
	b = append(b, 0)
	return binary.BigEndian.AppendUint32(b, uint32(version))
}

// partitionPrefix is the prefix of every key of one store partition (without the kind byte).
func partitionPrefix(id ID) []byte {
	b := versionPrefix(id.App, id.View, id.Version)
	b = append(b, id.Store...)
	b = append(b, 0)
	return binary.BigEndian.AppendUint32(b, uint32(id.Partition))
}

// prefixEnd returns the smallest key greater than every key with prefix p, or nil when none
// exists (p is all 0xff).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// appendOrderedInt64 appends v so that byte order equals numeric order (sign bit flipped).
func appendOrderedInt64(b []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(b, uint64(v)^(1<<63))
}

func decodeOrderedInt64(b []byte) int64 {
	return int64(binary.BigEndian.Uint64(b) ^ (1 << 63))
}

// appendEscaped appends key so that the result is prefix-free and ordered like key: 0x00
// becomes 0x00 0xff and the key ends with 0x00 0x01.
func appendEscaped(b, key []byte) []byte {
	for _, c := range key {
		if c == 0 {
			b = append(b, 0, 0xff)
			continue
		}
		b = append(b, c)
	}
	return append(b, 0, 0x01)
}

// decodeEscaped reverses appendEscaped, returning the key and the bytes after it.
func decodeEscaped(b []byte) (key, rest []byte, err error) {
	for i := 0; i < len(b); i++ {
		if b[i] != 0 {
			key = append(key, b[i])
			continue
		}
		if i+1 == len(b) {
			break
		}
		switch b[i+1] {
		case 0xff:
			key = append(key, 0)
			i++
		case 0x01:
			if key == nil {
				key = []byte{}
			}
			return key, b[i+2:], nil
		default:
			return nil, nil, errors.New("state: bad escape byte " + strconv.Itoa(int(b[i+1])) + " in windowed key")
		}
	}
	return nil, nil, errors.New("state: windowed key has no terminator")
}

// floorDiv divides rounding towards negative infinity, so segments of negative times are
// contiguous too.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// appendWindowChangelogKey appends the changelog key of a window: the store key followed by
// the window start in Unix milliseconds, big-endian.
func appendWindowChangelogKey(b, key []byte, startMs int64) []byte {
	b = append(b, key...)
	return binary.BigEndian.AppendUint64(b, uint64(startMs))
}

// decodeWindowChangelogKey splits a windowed changelog key into store key and window start.
func decodeWindowChangelogKey(k []byte) (key []byte, startMs int64, err error) {
	if len(k) < 8 {
		return nil, 0, errShortWindowKey
	}
	n := len(k) - 8
	return k[:n], int64(binary.BigEndian.Uint64(k[n:])), nil
}

// saturatingAdd adds durations in milliseconds without overflowing.
func saturatingAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	if b < 0 && a < math.MinInt64-b {
		return math.MinInt64
	}
	return a + b
}
