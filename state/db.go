package state

import (
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// DB is the process's one Pebble instance holding every store partition as a namespace. Its
// methods are safe for concurrent use; each store partition must have a single writer (the
// task that owns it) at a time.
type DB struct {
	cfg     Config
	pdb     *pebble.DB
	log     *slog.Logger
	metrics *metrics
	// memTableSize sizes restore batches.
	memTableSize uint64

	mu struct {
		sync.Mutex
		closed bool
		// stores remembers how each namespace was opened, so that one ID is never read
		// with two different layouts.
		stores map[string]storeDef
		// filters are the key filters of the namespaces opened so far (nil: too large to
		// filter); they outlive handles, since every write since the first handle is in them.
		filters map[string]*keyFilter
	}
}

// storeDef is how a namespace was opened.
type storeDef struct {
	kind byte
	win  WindowOptions
}

// Open opens (creating if needed) the Pebble instance in cfg.Dir with the memory budget of
// cfg.MemoryBytes.
func Open(cfg Config) (*DB, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	plan := planMemory(cfg.MemoryBytes)
	cache := pebble.NewCache(plan.blockCacheSize)
	// The DB holds its own reference to the cache.
	defer cache.Unref()
	opts := &pebble.Options{
		FS:                          cfg.FS,
		Cache:                       cache,
		MemTableSize:                plan.memTableSize,
		MemTableStopWritesThreshold: plan.memTableCount,
		Logger:                      pebbleLogger{cfg.Logger},
	}
	// Aggregations look up keys that are mostly new (a window, a key seen for the first
	// time): bloom filters answer those misses without reading data blocks.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	pdb, err := pebble.Open(cfg.Dir, opts)
	if err != nil {
		return nil, fmt.Errorf("state: open pebble in %s: %w", cfg.Dir, err)
	}
	cfg.Logger.Info("state: opened", "dir", cfg.Dir, "memory_bytes", cfg.MemoryBytes,
		"block_cache_bytes", plan.blockCacheSize, "memtable_bytes", plan.memTableSize, "memtables", plan.memTableCount)
	db := &DB{cfg: cfg, pdb: pdb, log: cfg.Logger, metrics: m, memTableSize: plan.memTableSize}
	db.mu.stores = make(map[string]storeDef)
	db.mu.filters = make(map[string]*keyFilter)
	return db, nil
}

// Close closes Pebble. Close every Iter, WindowIter, Snapshot and Txn first, and stop
// restores: Pebble refuses to close with open iterators. Writes applied without sync are
// flushed to the WAL by Close. Close is idempotent.
func (db *DB) Close() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.mu.closed {
		return nil
	}
	db.mu.closed = true
	if err := db.pdb.Close(); err != nil {
		return fmt.Errorf("state: close pebble: %w", err)
	}
	return nil
}

// register records how a namespace is opened, refuses a different definition, and gives the
// handle the namespace's key filter.
func (db *DB) register(id ID, def storeDef) (*part, error) {
	if err := id.Validate(); err != nil {
		return nil, err
	}
	p := newPart(db, id, def.kind)
	f, known, err := db.define(id, p.ns, def)
	if err != nil {
		return nil, err
	}
	if !known {
		// The first handle of a namespace fills its filter from disk, outside the lock; no
		// write can reach the namespace before a handle is returned.
		filled, err := fillKeyFilter(db.pdb, p.ns)
		if err != nil {
			return nil, fmt.Errorf("state: %s: read keys for its filter: %w", id, err)
		}
		f = db.keepFilter(p.ns, filled)
	}
	p.filter = f
	return p, nil
}

// define records def for namespace ns and returns its filter, if it has one yet.
func (db *DB) define(id ID, ns []byte, def storeDef) (*keyFilter, bool, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.mu.closed {
		return nil, false, ErrClosed
	}
	if old, ok := db.mu.stores[string(ns)]; ok && old != def {
		return nil, false, fmt.Errorf("%w: %s was opened as %s and now as %s", ErrStoreConflict, id, old, def)
	}
	db.mu.stores[string(ns)] = def
	f, ok := db.mu.filters[string(ns)]
	return f, ok, nil
}

// keepFilter makes f the filter of ns, unless a concurrent first handle set one already.
func (db *DB) keepFilter(ns []byte, f *keyFilter) *keyFilter {
	db.mu.Lock()
	defer db.mu.Unlock()
	if old, ok := db.mu.filters[string(ns)]; ok {
		return old
	}
	db.mu.filters[string(ns)] = f
	return f
}

func (d storeDef) String() string {
	if d.kind == kindKV {
		return "a key-value store"
	}
	return fmt.Sprintf("a windowed store %+v", d.win)
}

// DropVersion deletes the local data of every store partition of one version of a view (after
// a rebuild replaced it) with one range delete. Handles on those stores stay usable and see
// empty stores. It does not touch the changelog topics.
func (db *DB) DropVersion(app, view string, version int) error {
	p := versionPrefix(app, view, version)
	return db.dropRange(p, prefixEnd(p))
}

// DropPartition deletes the local data and applied offset of one store partition (e.g. when
// its task moved to another instance for good); a later Restore starts from the beginning.
func (db *DB) DropPartition(id ID) error {
	if err := id.Validate(); err != nil {
		return err
	}
	p := partitionPrefix(id)
	return db.dropRange(p, prefixEnd(p))
}

// dropRange deletes [start, end) and syncs: drops are rare, and a lost drop would leave stale
// data that no changelog corrects.
func (db *DB) dropRange(start, end []byte) error {
	if err := db.pdb.DeleteRange(start, end, pebble.Sync); err != nil {
		return fmt.Errorf("state: range delete: %w", err)
	}
	return nil
}

// Reader is something store reads can see: the DB's latest applied state (*DB), a consistent
// point in time (*Snapshot), or a transaction's view with its pending writes (*Txn).
type Reader interface {
	pebbleReader() pebble.Reader
	pendingTxn() *Txn
}

func (db *DB) pebbleReader() pebble.Reader { return db.pdb }
func (db *DB) pendingTxn() *Txn            { return nil }

// Snapshot is a consistent point-in-time view of every store; scans that read one snapshot
// see one state, including the applied offsets. Close it when done.
type Snapshot struct {
	snap *pebble.Snapshot
}

// NewSnapshot returns a snapshot of the latest applied state.
func (db *DB) NewSnapshot() *Snapshot {
	return &Snapshot{snap: db.pdb.NewSnapshot()}
}

func (s *Snapshot) pebbleReader() pebble.Reader { return s.snap }
func (s *Snapshot) pendingTxn() *Txn            { return nil }

// Close releases the snapshot.
func (s *Snapshot) Close() error {
	return s.snap.Close()
}

// getCopy reads key from r, returning a copy of the value.
func getCopy(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(key)
	if err == pebble.ErrNotFound {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("state: get: %w", err)
	}
	out := make([]byte, len(v))
	copy(out, v)
	return out, true, closeQuietly(closer)
}

func closeQuietly(c io.Closer) error {
	if err := c.Close(); err != nil {
		return fmt.Errorf("state: release read: %w", err)
	}
	return nil
}

// pebbleLogger routes Pebble's messages to slog; Pebble's informational lines (flushes,
// compactions) are Debug so they do not drown the service's own logs.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf is called by Pebble on corruption it cannot survive; Pebble requires it not to return.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := "pebble: " + fmt.Sprintf(format, args...)
	p.l.Error(msg)
	panic(msg)
}
