package state

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultDir is the directory of the local stores when Config.Dir is empty.
const DefaultDir = "./tarn-data"

// minMemoryBytes is the smallest memory budget Pebble is given: two 4 MiB memtables and a
// small block cache.
const minMemoryBytes = 16 << 20

// Config configures the process's one Pebble instance. The zero value is usable.
type Config struct {
	// Dir is the directory of the Pebble instance. Default: DefaultDir. Everything in it can
	// be rebuilt from the changelogs, so deleting it is survivable (restore takes longer).
	Dir string
	// FS is the file system Pebble uses. Default: the operating system's (vfs.Default);
	// statetest uses vfs.NewMem.
	FS vfs.FS
	// MemoryBytes is the memory budget of every store in the process together: a quarter goes
	// to memtables, the rest to the shared block cache. Default: a quarter of the cgroup
	// memory limit or, without one, of physical memory. At least 16 MiB.
	MemoryBytes int64
	// Logger receives Pebble's messages (informational ones at Debug) and restore progress.
	// Default: slog.Default().
	Logger *slog.Logger
	// Registerer receives the package's Prometheus metrics. Default: a private registry, so
	// that several DBs in one process (tests) do not collide.
	Registerer prometheus.Registerer
}

// withDefaults returns a copy of c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.MemoryBytes == 0 {
		c.MemoryBytes = max(systemMemory()/4, minMemoryBytes)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	return c
}

// Validate reports every problem of a Config (after defaults are filled) at once.
func (c Config) Validate() error {
	var errs []error
	if c.MemoryBytes < minMemoryBytes {
		errs = append(errs, fmt.Errorf("state: MemoryBytes %d is below the minimum %d; raise it or leave it 0 for the default", c.MemoryBytes, minMemoryBytes))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("state: Dir is empty"))
	}
	return errors.Join(errs...)
}

// memoryPlan splits the memory budget between memtables and the block cache.
type memoryPlan struct {
	memTableSize   uint64
	memTableCount  int
	blockCacheSize int64
}

func planMemory(budget int64) memoryPlan {
	const (
		minTable = 4 << 20
		maxTable = 256 << 20
	)
	tables := budget / 4
	size := min(max(tables/4, minTable), maxTable)
	count := int(max(tables/size, 2))
	return memoryPlan{
		memTableSize:   uint64(size),
		memTableCount:  count,
		blockCacheSize: max(budget-size*int64(count), minTable),
	}
}
