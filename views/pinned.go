package views

import (
	"context"
	"time"

	"github.com/tarnhq/tarn/internal/partition"
)

// Pinned reads one version of a view. A read that spans instances (a scan fanned out to the
// owners of every partition) pins the version the coordinating instance serves and asks every
// owner for that version, so it sees the old version or the new one, never a mix, even while
// instances follow a switch at slightly different moments. A replaced version stays readable
// until [RebuildConfig].DeleteAfter; a rebuilding one can be read before it serves.
type Pinned struct {
	e *engine
}

// Pin returns the reads of version of view on this instance (0: the serving version). It
// fails with [ErrNoVersion] when that version does not run here.
func (r *Runtime) Pin(view Name, version int) (Pinned, error) {
	e, err := r.queryableAt(view, version)
	if err != nil {
		return Pinned{}, err
	}
	return Pinned{e: e}, nil
}

// Version is the pinned version.
func (p Pinned) Version() int { return p.e.v.version }

// Partitions is the partition count of the version's served store.
func (p Pinned) Partitions() int32 { return p.e.subParts[p.e.v.served.sub.id] }

// PartitionOf returns the partition that holds key in this version.
func (p Pinned) PartitionOf(key string) int32 { return partition.For([]byte(key), p.Partitions()) }

// Get is [Runtime.Get] at the pinned version.
func (p Pinned) Get(ctx context.Context, key string) ([]byte, Position, error) {
	return p.e.get(ctx, key)
}

// Scan is [Runtime.Scan] at the pinned version.
func (p Pinned) Scan(rng ScanRange) ([]Entry, Position, error) {
	return p.e.scan(rng)
}

// Windows is [Runtime.Windows] at the pinned version.
func (p Pinned) Windows(ctx context.Context, key string, from, to time.Time) ([]WindowValue, Position, error) {
	return p.e.windowsOf(ctx, key, from, to)
}

// Owners maps each partition of the version to the advertised address of its owner, from the
// version's own consumer group (versions assign partitions independently).
func (p Pinned) Owners(ctx context.Context) (map[int32]string, error) { return p.e.owners(ctx) }

// Info describes the version as this instance runs it.
func (p Pinned) Info() Info {
	in := p.e.info()
	in.Frozen = p.e.frozen
	return in
}
