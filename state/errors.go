package state

import (
	"errors"
	"fmt"
)

var (
	// ErrClosed is returned by a DB that was closed; use errors.Is.
	ErrClosed = errors.New("state: closed")
	// ErrInvalidID wraps the problems of an [ID] that cannot name a store partition.
	ErrInvalidID = errors.New("state: invalid store ID")
	// ErrInvalidOptions wraps the problems of [WindowOptions] or [RestoreConfig].
	ErrInvalidOptions = errors.New("state: invalid options")
	// ErrStoreConflict is returned when an ID is opened as a different kind of store, or as a
	// windowed store with different options, than it was opened with before in this DB.
	ErrStoreConflict = errors.New("state: store opened twice with different definitions")
	// ErrTxnState is returned when a [Txn] method is called out of order: writes after
	// Produce, Apply before a successful Produce, anything after Apply or Discard.
	ErrTxnState = errors.New("state: transaction used out of order")
	// ErrExpired is returned when a write targets a window that retention has already
	// dropped; the write is not made. Use errors.Is.
	ErrExpired = errors.New("state: window expired")
	// ErrPartitioner is returned by [Txn.Produce] when the client wrote a changelog record to
	// another partition than the store's: configure the client with
	// kgo.RecordPartitioner(kgo.ManualPartitioner()) or a partitioner that honours
	// Record.Partition.
	ErrPartitioner = errors.New("state: client partitioner ignored the changelog partition")
	// ErrMalformed is wrapped by every [MalformedError]; use errors.Is.
	ErrMalformed = errors.New("state: malformed changelog record")
	// ErrChangelogMismatch is returned by [EnsureChangelog] when the topic exists with another
	// partition count or cleanup policy than the store needs.
	ErrChangelogMismatch = errors.New("state: changelog topic does not match its store")
)

// MalformedError reports a changelog record that cannot be decoded into its store, naming
// where it is so that it can be inspected (kcat -t Topic -p Partition -o Offset -c 1).
type MalformedError struct {
	Topic     string
	Partition int32
	Offset    int64
	Reason    error
}

func (e *MalformedError) Error() string {
	return fmt.Sprintf("state: malformed changelog record at %s partition %d offset %d: %v", e.Topic, e.Partition, e.Offset, e.Reason)
}

// Unwrap returns ErrMalformed and the reason.
func (e *MalformedError) Unwrap() []error { return []error{ErrMalformed, e.Reason} }
