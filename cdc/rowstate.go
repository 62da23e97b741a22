package cdc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// rowState is the local copy of the last row written per key, from which an UPDATE's
// unchanged TOAST columns ('u' in pgoutput) are filled: Postgres does not send them, and
// re-selecting them would race with later changes.
//
// It is trusted only when its recorded position equals the source's position in Kafka. It is
// written ahead of Kafka in chunks; the first chunk of a batch deletes the recorded position,
// and the batch's position is recorded after Kafka committed the batch. After a crash the two
// differ and the state is rebuilt from the table topics (rebuild).
type rowState struct {
	db    *pebble.DB
	batch *pebble.Batch
	dirty bool // the recorded position is deleted (in db or batch)
}

const (
	rowPrefix       = 'r'
	positionKey     = "p"
	chunkOps        = 10000
	chunkBytes      = 64 << 20
	rowStateOpenErr = "cdc: open local row state in %s (Config.Dir): %w"
)

func openRowState(dir string) (*rowState, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return nil, fmt.Errorf(rowStateOpenErr, dir, err)
	}
	return &rowState{db: db, batch: db.NewIndexedBatch()}, nil
}

func (s *rowState) close() error {
	s.batch.Close()
	return s.db.Close()
}

func rowKey(table string, key []byte) []byte {
	k := make([]byte, 0, 2+len(table)+len(key))
	k = append(k, rowPrefix)
	k = append(k, table...)
	k = append(k, 0)
	return append(k, key...)
}

// recorded is the position the state is at, or nil when it is at none.
func (s *rowState) recorded() (*position, error) {
	v, closer, err := s.db.Get([]byte(positionKey))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cdc: read local row state: %w", err)
	}
	defer closer.Close()
	p := new(position)
	if err := json.Unmarshal(v, p); err != nil {
		return nil, fmt.Errorf("cdc: local row state position: %w", err)
	}
	return p, nil
}

func (s *rowState) markDirty() error {
	if s.dirty {
		return nil
	}
	s.dirty = true
	return s.batch.Delete([]byte(positionKey), nil)
}

func (s *rowState) set(table string, key, row []byte) error {
	if err := s.markDirty(); err != nil {
		return err
	}
	if err := s.batch.Set(rowKey(table, key), row, nil); err != nil {
		return err
	}
	return s.maybeFlush()
}

func (s *rowState) del(table string, key []byte) error {
	if err := s.markDirty(); err != nil {
		return err
	}
	if err := s.batch.Delete(rowKey(table, key), nil); err != nil {
		return err
	}
	return s.maybeFlush()
}

func (s *rowState) truncate(table string) error {
	if err := s.markDirty(); err != nil {
		return err
	}
	start := rowKey(table, nil)
	end := bytes.Clone(start)
	end[len(end)-1] = 1
	return s.batch.DeleteRange(start, end, nil)
}

// reset forgets every row.
func (s *rowState) reset() error {
	if err := s.markDirty(); err != nil {
		return err
	}
	return s.batch.DeleteRange([]byte{rowPrefix}, []byte{rowPrefix + 1}, nil)
}

// get returns the last row written for key, seeing writes not yet flushed.
func (s *rowState) get(table string, key []byte) ([]byte, bool, error) {
	v, closer, err := s.batch.Get(rowKey(table, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("cdc: read local row state: %w", err)
	}
	defer closer.Close()
	return bytes.Clone(v), true, nil
}

// maybeFlush bounds the memory of a batch: a million-row transaction is written in chunks.
func (s *rowState) maybeFlush() error {
	if s.batch.Count() < chunkOps && s.batch.Len() < chunkBytes {
		return nil
	}
	return s.flush()
}

func (s *rowState) flush() error {
	if s.batch.Empty() {
		return nil
	}
	if err := s.batch.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("cdc: write local row state: %w", err)
	}
	s.batch.Close()
	s.batch = s.db.NewIndexedBatch()
	return nil
}

// commit records pos, to be called once Kafka holds everything up to pos. It does not sync:
// losing its tail in a machine crash leaves an older or no position, which forces a rebuild.
func (s *rowState) commit(pos *position) error {
	v, err := json.Marshal(pos)
	if err != nil {
		return err
	}
	if err := s.batch.Set([]byte(positionKey), v, nil); err != nil {
		return err
	}
	if err := s.flush(); err != nil {
		return err
	}
	s.dirty = false
	return nil
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
