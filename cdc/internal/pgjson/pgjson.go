package pgjson

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// SessionParams are the run-time parameters under which Postgres prints values the way this
// package parses them. Every connection whose output is converted must set them.
var SessionParams = map[string]string{
	"DateStyle":          "ISO, MDY",
	"TimeZone":           "UTC",
	"bytea_output":       "hex",
	"IntervalStyle":      "postgres",
	"extra_float_digits": "1",
}

// Kind is how a Postgres type is written in JSON.
type Kind uint8

const (
	// String: the Postgres text in a JSON string (text, uuid, date, time, interval, enum, ...).
	String Kind = iota
	// Bool: true or false.
	Bool
	// Integer: an integer number, copied digit for digit.
	Integer
	// Decimal: numeric, float4 and float8, copied digit for digit; NaN and infinities become
	// the strings "NaN", "Infinity" and "-Infinity".
	Decimal
	// JSON: json and jsonb, embedded as they are.
	JSON
	// Bytes: bytea, as standard base64 in a JSON string.
	Bytes
	// Timestamptz: RFC 3339 with the zone, e.g. "2024-05-01T10:00:00.5Z".
	Timestamptz
	// Timestamp: RFC 3339 without a zone, e.g. "2024-05-01T10:00:00.5".
	Timestamp
	// Array: a JSON array of the element type (nested for multi-dimensional arrays).
	Array
)

// Type says how to write values of one Postgres type. Elem is set for arrays; Delim is the
// array element delimiter (',' for all built-in types but box).
type Type struct {
	OID   uint32
	Name  string
	Kind  Kind
	Elem  *Type
	Delim byte
}

// Well-known OIDs of built-in types (pg_type.dat).
const (
	OIDBool        = 16
	OIDBytea       = 17
	OIDInt8        = 20
	OIDInt2        = 21
	OIDInt4        = 23
	OIDOID         = 26
	OIDJSON        = 114
	OIDFloat4      = 700
	OIDFloat8      = 701
	OIDTimestamp   = 1114
	OIDTimestamptz = 1184
	OIDNumeric     = 1700
	OIDJSONB       = 3802
)

// KindOf is the kind of a built-in scalar type (after domains are resolved to their base).
func KindOf(oid uint32) Kind {
	switch oid {
	case OIDBool:
		return Bool
	case OIDInt2, OIDInt4, OIDInt8, OIDOID:
		return Integer
	case OIDFloat4, OIDFloat8, OIDNumeric:
		return Decimal
	case OIDJSON, OIDJSONB:
		return JSON
	case OIDBytea:
		return Bytes
	case OIDTimestamptz:
		return Timestamptz
	case OIDTimestamp:
		return Timestamp
	}
	return String
}

// ErrMalformed reports text that is not a valid Postgres output of its type; use errors.Is.
var ErrMalformed = errors.New("pgjson: malformed value")

// Append appends the JSON form of text, a value of type t in Postgres text format.
func (t *Type) Append(dst, text []byte) ([]byte, error) {
	switch t.Kind {
	case Bool:
		switch string(text) {
		case "t":
			return append(dst, "true"...), nil
		case "f":
			return append(dst, "false"...), nil
		}
		return dst, fmt.Errorf("%w: bool %q", ErrMalformed, text)
	case Integer, Decimal:
		if isJSONNumber(text) {
			return append(dst, text...), nil
		}
		if t.Kind == Decimal && isSpecialFloat(text) {
			return AppendString(dst, text), nil
		}
		return dst, fmt.Errorf("%w: %s %q", ErrMalformed, t.Name, text)
	case JSON:
		if !json.Valid(text) {
			return dst, fmt.Errorf("%w: %s is not valid JSON", ErrMalformed, t.Name)
		}
		return append(dst, text...), nil
	case Bytes:
		return appendBytea(dst, text)
	case Timestamptz:
		return appendTime(dst, text, true), nil
	case Timestamp:
		return appendTime(dst, text, false), nil
	case Array:
		return t.appendArray(dst, text)
	}
	return AppendString(dst, text), nil
}

func isSpecialFloat(text []byte) bool {
	switch string(text) {
	case "NaN", "Infinity", "-Infinity":
		return true
	}
	return false
}

// isJSONNumber reports whether b matches the JSON number grammar (RFC 8259 §6).
func isJSONNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i == len(b)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func appendBytea(dst, text []byte) ([]byte, error) {
	if len(text) < 2 || text[0] != '\\' || text[1] != 'x' || len(text)%2 != 0 {
		return dst, fmt.Errorf("%w: bytea is not in hex format (set bytea_output=hex)", ErrMalformed)
	}
	raw := make([]byte, (len(text)-2)/2)
	for i := range raw {
		hi, ok1 := unhex(text[2+2*i])
		lo, ok2 := unhex(text[3+2*i])
		if !ok1 || !ok2 {
			return dst, fmt.Errorf("%w: bytea has a non-hex digit", ErrMalformed)
		}
		raw[i] = hi<<4 | lo
	}
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, raw)
	return append(dst, '"'), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// ISO DateStyle output: "2024-05-01 10:00:00.123456+00" (the zone may carry minutes and
// seconds). Years outside 0001–9999, BC dates and infinities have no RFC 3339 form: they are
// kept as the Postgres text.
var (
	tzLayouts = []string{"2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00", "2006-01-02 15:04:05.999999-07:00:00"}
	tsLayout  = "2006-01-02 15:04:05.999999"
)

func appendTime(dst, text []byte, zoned bool) []byte {
	s := string(text)
	if zoned {
		for _, layout := range tzLayouts {
			if t, err := time.Parse(layout, s); err == nil {
				return strconv.AppendQuote(dst, t.Format(time.RFC3339Nano))
			}
		}
		return AppendString(dst, text)
	}
	if t, err := time.Parse(tsLayout, s); err == nil {
		return strconv.AppendQuote(dst, t.Format("2006-01-02T15:04:05.999999999"))
	}
	return AppendString(dst, text)
}

// AppendString appends s as a JSON string. Postgres text is valid UTF-8 in a UTF-8 database;
// invalid bytes (from a SQL_ASCII database) are replaced by U+FFFD rather than corrupting JSON.
func AppendString(dst, s []byte) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = appendControl(dst, c)
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+n]...)
		}
		i += n
	}
	return append(dst, '"')
}

func appendControl(dst []byte, c byte) []byte {
	switch c {
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	const hex = "0123456789abcdef"
	return append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
}
