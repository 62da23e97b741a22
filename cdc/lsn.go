package cdc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// LSN is a Postgres log sequence number, a byte position in the write-ahead log.
type LSN uint64

// String formats the LSN as Postgres does, e.g. "16/B374D848".
func (l LSN) String() string {
	return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l))
}

// ErrBadLSN reports text that is not an LSN; use errors.Is.
var ErrBadLSN = errors.New("cdc: malformed LSN")

// ParseLSN parses the Postgres text form "XXX/XXX" (two hexadecimal halves of at most 8 digits).
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || !isHex32(hi) || !isHex32(lo) {
		return 0, fmt.Errorf("%w: %q (want two hexadecimal halves, e.g. 16/B374D848)", ErrBadLSN, s)
	}
	h, _ := strconv.ParseUint(hi, 16, 32)
	l, _ := strconv.ParseUint(lo, 16, 32)
	return LSN(h<<32 | l), nil
}

func isHex32(s string) bool {
	if len(s) == 0 || len(s) > 8 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// MarshalText writes the Postgres text form, so that LSNs read well in JSON.
func (l LSN) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText parses the Postgres text form.
func (l *LSN) UnmarshalText(b []byte) error {
	v, err := ParseLSN(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}
