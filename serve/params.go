package serve

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// maxPartitionsParam bounds the partitions named by one parameter.
const maxPartitionsParam = 4096

// maxKeyBytes bounds a key given in a path or parameter.
const maxKeyBytes = 4096

// params are the query parameters of one request, parsed and checked.
type params struct {
	b64 bool // enc=b64: keys in the path, parameters and body are base64url

	prefix, start, end, cursor []byte
	cursorVersion              int // the view version a cursor pins; 0 without a cursor
	version                    int // version=: the view version to scan; 0 when absent
	hasPrefix, hasEnd          bool
	limit                      int

	windows  bool
	from, to time.Time

	watch    bool
	wait     time.Duration
	hasWait  bool
	after    Position
	hasAfter bool

	min    Position
	inputs InputOffsets // min_offsets' topic:partition:offset items
	hasMin bool

	partitions []int32
}

// paramSet names the parameters one route accepts.
type paramSet map[string]bool

func set(names ...string) paramSet {
	s := paramSet{}
	for _, n := range names {
		s[n] = true
	}
	return s
}

var (
	commonParams = []string{"enc", "min_offsets", "min_lsn", "wait"}
	keyParams    = set(append([]string{"from", "to", "watch", "after"}, commonParams...)...)
	scanParams   = set(append([]string{"prefix", "start", "end", "limit", "cursor", "partitions", "version"}, commonParams...)...)
	changeParams = set("enc", "after", "partitions")
	listParams   = set()
)

// limits are the bounds of the parameters that have one.
type limits struct {
	defaultLimit, maxLimit int
	maxWait                time.Duration
}

func (c *Config) limits() limits {
	return limits{defaultLimit: c.DefaultLimit, maxLimit: c.MaxLimit, maxWait: c.MaxWait}
}

// parseParams reads a raw query for a route that accepts allowed; the error names the first
// bad parameter.
func parseParams(rawQuery string, allowed paramSet, lim limits) (params, error) {
	p := params{limit: lim.defaultLimit}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return p, badParam(badPart(rawQuery), "malformed percent-encoding or separator in the query")
	}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if name == "" {
			return p, badParam("query", "a parameter has an empty name")
		}
		if !allowed[name] {
			return p, badParam(name, "unknown parameter for this route")
		}
		if len(q[name]) > 1 {
			return p, badParam(name, "given more than once")
		}
	}
	get := func(name string) (string, bool) {
		v, ok := q[name]
		if !ok {
			return "", false
		}
		return v[0], true
	}
	if v, ok := get("enc"); ok {
		switch v {
		case "text":
		case "b64":
			p.b64 = true
		default:
			return p, badParam("enc", "%q is not text or b64", v)
		}
	}
	steps := []func(func(string) (string, bool), *params, limits) error{
		parseRange, parseLimit, parseWindows, parseLive, parseMin, parseMisc,
	}
	for _, step := range steps {
		if err := step(get, &p, lim); err != nil {
			return p, err
		}
	}
	return p, nil
}

func parseRange(get func(string) (string, bool), p *params, _ limits) error {
	var err error
	key := func(name string) ([]byte, bool, error) {
		v, ok := get(name)
		if !ok {
			return nil, false, nil
		}
		k, err := decodeKey(name, v, p.b64, true)
		return k, true, err
	}
	var hasStart bool
	if p.prefix, p.hasPrefix, err = key("prefix"); err != nil {
		return err
	}
	if p.start, hasStart, err = key("start"); err != nil {
		return err
	}
	if p.end, p.hasEnd, err = key("end"); err != nil {
		return err
	}
	if p.hasPrefix && (hasStart || p.hasEnd) {
		return badParam("prefix", "prefix= excludes start= and end=")
	}
	if p.hasEnd && bytes.Compare(p.start, p.end) > 0 {
		return badParam("end", "end= is before start=")
	}
	if p.hasPrefix {
		p.start, p.end = p.prefix, prefixEnd(p.prefix)
		p.hasEnd = p.end != nil
	}
	if v, ok := get("cursor"); ok {
		if p.cursorVersion, p.cursor, err = parseCursor(v); err != nil {
			return err
		}
	}
	return nil
}

func parseLimit(get func(string) (string, bool), p *params, lim limits) error {
	v, ok := get("limit")
	if !ok {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > lim.maxLimit {
		return badParam("limit", "%q is not an integer from 1 to %d", v, lim.maxLimit)
	}
	p.limit = n
	return nil
}

// minTime and maxTime bound the windows a read without from= or to= covers.
var (
	minTime = time.Unix(0, 0).UTC()
	maxTime = time.Unix(math.MaxInt64/1000, 0).UTC()
)

func parseWindows(get func(string) (string, bool), p *params, _ limits) error {
	fv, hasFrom := get("from")
	tv, hasTo := get("to")
	if !hasFrom && !hasTo {
		return nil
	}
	p.windows = true
	p.from, p.to = minTime, maxTime
	var err error
	if hasFrom {
		if p.from, err = parseTime("from", fv); err != nil {
			return err
		}
	}
	if hasTo {
		if p.to, err = parseTime("to", tv); err != nil {
			return err
		}
	}
	if !p.from.Before(p.to) {
		return badParam("to", "to= must be after from=")
	}
	return nil
}

// parseTime reads RFC 3339 or milliseconds since the Unix epoch.
func parseTime(name, v string) (time.Time, error) {
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
		if ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
			return time.Time{}, badParam(name, "%q is out of range", v)
		}
		return time.UnixMilli(ms).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil || t.Year() < 1970 || t.Year() > 2200 {
		return time.Time{}, badParam(name, "%q is not an RFC 3339 time or Unix milliseconds from 1970 to 2200", v)
	}
	return t.UTC(), nil
}

func parseLive(get func(string) (string, bool), p *params, lim limits) error {
	if v, ok := get("watch"); ok {
		if v != "sse" {
			return badParam("watch", "%q is not sse", v)
		}
		p.watch = true
	}
	if v, ok := get("wait"); ok {
		d, err := parseWait(v)
		if err != nil || d <= 0 || d > lim.maxWait {
			return badParam("wait", "%q is not a duration above 0 and at most %s (e.g. 30s)", v, lim.maxWait)
		}
		p.wait, p.hasWait = d, true
	}
	if v, ok := get("after"); ok {
		pos, err := ParsePosition(v)
		if err != nil {
			return &paramError{param: "after", err: err}
		}
		p.after, p.hasAfter = pos, true
	}
	if p.watch && p.hasWait {
		return badParam("wait", "wait= is for long-poll; a watch=sse stream has no wait")
	}
	return nil
}

// parseWait reads a Go duration ("1.5s", "200ms") or whole seconds ("30").
func parseWait(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil {
		if n > math.MaxInt32 {
			return 0, errors.New("too long")
		}
		return time.Duration(n) * time.Second, nil
	}
	return time.ParseDuration(v)
}

func parseMin(get func(string) (string, bool), p *params, _ limits) error {
	if v, ok := get("min_offsets"); ok {
		pos, inputs, err := ParseMinOffsets(v)
		if err != nil {
			return &paramError{param: "min_offsets", err: err}
		}
		p.min, p.inputs, p.hasMin = pos, inputs, true
	}
	if v, ok := get("min_lsn"); ok {
		lsn, err := ParseLSN(v)
		if err != nil {
			return &paramError{param: "min_lsn", err: err}
		}
		p.min.LSN, p.hasMin = lsn, true
	}
	return nil
}

func parseMisc(get func(string) (string, bool), p *params, _ limits) error {
	if v, ok := get("partitions"); ok {
		parts, err := parsePartitions(v)
		if err != nil {
			return err
		}
		p.partitions = parts
	}
	if v, ok := get("version"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return badParam("version", "%q is not a view version (a positive integer)", v)
		}
		p.version = n
	}
	return nil
}

// parsePartitions reads "0,3,5": ascending, distinct, non-negative.
func parsePartitions(v string) ([]int32, error) {
	items := strings.Split(v, ",")
	if len(items) > maxPartitionsParam {
		return nil, badParam("partitions", "more than %d partitions", maxPartitionsParam)
	}
	parts := make([]int32, 0, len(items))
	for _, item := range items {
		n, err := strconv.ParseInt(item, 10, 32)
		if err != nil || n < 0 {
			return nil, badParam("partitions", "%q is not a non-negative 32-bit integer", item)
		}
		if len(parts) > 0 && int32(n) <= parts[len(parts)-1] {
			return nil, badParam("partitions", "partitions must be ascending and distinct")
		}
		parts = append(parts, int32(n))
	}
	return parts, nil
}

// decodeKey reads a key: UTF-8 text, or base64url when b64. Scan bounds may be empty; keys
// may not.
func decodeKey(name, v string, b64, mayBeEmpty bool) ([]byte, error) {
	var k []byte
	if b64 {
		var err error
		if k, err = base64.RawURLEncoding.DecodeString(v); err != nil {
			return nil, badParam(name, "not unpadded base64url (enc=b64)")
		}
	} else {
		if !utf8.ValidString(v) {
			return nil, badParam(name, "not valid UTF-8; use enc=b64 for binary keys")
		}
		k = []byte(v)
	}
	if len(k) == 0 && !mayBeEmpty {
		return nil, badParam(name, "empty key")
	}
	if len(k) > maxKeyBytes {
		return nil, badParam(name, "key longer than %d bytes", maxKeyBytes)
	}
	return k, nil
}

// pathKey reads the {key} path segment, which the router keeps percent-encoded.
func pathKey(raw string, b64 bool) ([]byte, error) {
	v, err := url.PathUnescape(raw)
	if err != nil {
		return nil, badParam("key", "malformed percent-encoding")
	}
	return decodeKey("key", v, b64, false)
}

// prefixEnd is the smallest key above every key with the prefix, nil when there is none
// (a prefix of 0xff bytes only).
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// A cursor is the unpadded base64url of a format byte (2), the uvarint version of the view the
// scan reads (pinned by its first page) and the key the next page starts at, inclusive.
const cursorFormat = 2

func makeCursor(viewVersion int, next []byte) string {
	b := binary.AppendUvarint([]byte{cursorFormat}, uint64(max(viewVersion, 0)))
	return base64.RawURLEncoding.EncodeToString(append(b, next...))
}

func parseCursor(v string) (int, []byte, error) {
	bad := badParam("cursor", "not a cursor from a previous page of this API")
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(b) == 0 || b[0] != cursorFormat || len(b) > maxKeyBytes+12 {
		return 0, nil, bad
	}
	version, n := binary.Uvarint(b[1:])
	if n <= 0 || version > math.MaxInt32 {
		return 0, nil, bad
	}
	return int(version), b[1+n:], nil
}

// encodeKey is the body form of a key: text, or base64url with enc=b64; a key that is not
// valid UTF-8 cannot be text, and the entry says so (see entryJSON).
func encodeKey(k []byte, b64 bool) (string, bool) {
	if b64 || !utf8.Valid(k) {
		return base64.RawURLEncoding.EncodeToString(k), true
	}
	return string(k), false
}

// checkPartitions checks that parts exist in a view of n partitions.
func checkPartitions(parts []int32, n int32) error {
	if len(parts) > 0 && parts[len(parts)-1] >= n {
		return badParam("partitions", "the view has %d partitions; %d is not one of them", n, parts[len(parts)-1])
	}
	return nil
}

// badPart names the parameter of the first malformed part of a query ("query" when its name
// is unreadable too).
func badPart(rawQuery string) string {
	for part := range strings.SplitSeq(rawQuery, "&") {
		if _, err := url.ParseQuery(part); err != nil {
			name, _, _ := strings.Cut(part, "=")
			if n, err := url.QueryUnescape(name); err == nil && n != "" {
				return n
			}
			break
		}
	}
	return "query"
}
