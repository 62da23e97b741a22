package client

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors a [*Problem] matches; test with errors.Is.
var (
	// ErrNotCaughtUp: the view had not applied the writes a read named within its wait
	// (503 not-caught-up). Retry after Problem.RetryAfter, or wait longer.
	ErrNotCaughtUp = errors.New("client: the view has not caught up with the write")
	// ErrNotFound: the view has no value for the key (404 no-key).
	ErrNotFound = errors.New("client: the view has no value for this key")
)

// Problem is an error answer of tarn's API (an RFC 9457 problem body).
type Problem struct {
	Status int    `json:"status"`
	Type   string `json:"type"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	// Param names the query parameter that was wrong, on a 400.
	Param string `json:"param"`
	// Position is how far the view had got, on a 404 for a key and a 503 not-caught-up.
	Position *Position `json:"position"`
	// RetryAfter is the server's Retry-After, on a 503; 0 when absent.
	RetryAfter time.Duration `json:"-"`
}

const problemPrefix = "urn:tarn:problem:"

func (p *Problem) Error() string {
	return fmt.Sprintf("client: tarn answered %d %s: %s", p.Status, strings.TrimPrefix(p.Type, problemPrefix), p.Detail)
}

// Unwrap makes errors.Is see the sentinel of the problem's type, if it has one.
func (p *Problem) Unwrap() error {
	switch p.Type {
	case problemPrefix + "not-caught-up":
		return ErrNotCaughtUp
	case problemPrefix + "no-key":
		return ErrNotFound
	}
	return nil
}
