package client

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// LSN is a Postgres write-ahead log position; 0 means none. It is its own type here rather
// than tarn's so that this package imports neither tarn's server nor a Postgres driver; it
// scans from a pg_lsn column (database/sql, pgx) and encodes as Postgres writes it.
type LSN uint64

// ErrBadLSN reports text that is not an LSN. Test with errors.Is.
var ErrBadLSN = errors.New("client: malformed LSN")

// String formats l as Postgres does: two hexadecimal halves, "16/B374D848".
func (l LSN) String() string {
	return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l))
}

// ParseLSN reads the "X/Y" form of an LSN.
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || hi == "" || lo == "" || len(hi) > 8 || len(lo) > 8 {
		return 0, fmt.Errorf("%w: %q is not of the form X/Y in hexadecimal", ErrBadLSN, s)
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%w: %q is not of the form X/Y in hexadecimal", ErrBadLSN, s)
	}
	return LSN(h<<32 | l), nil
}

// MarshalText and UnmarshalText make an LSN its "X/Y" text in JSON; an empty text is 0.
func (l LSN) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

func (l *LSN) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*l = 0
		return nil
	}
	v, err := ParseLSN(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Scan reads a pg_lsn (or its text) from a database driver: a query can scan
// pg_current_wal_insert_lsn() into an LSN.
func (l *LSN) Scan(src any) error {
	switch v := src.(type) {
	case string:
		return l.UnmarshalText([]byte(v))
	case []byte:
		return l.UnmarshalText(v)
	case nil:
		*l = 0
		return nil
	}
	return fmt.Errorf("%w: cannot scan %T", ErrBadLSN, src)
}
