package state

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/tarnhq/tarn/internal/topic"
)

// ID names one partition of one store of one version of a view. Its changelog is partition
// Partition of [ID.Topic]; its local data is a namespace of the process's one Pebble instance.
type ID struct {
	App     string
	View    string
	Version int
	Store   string
	// Partition is the store partition and the changelog partition; it equals the input
	// partition of the task that owns the store.
	Partition int32
}

// Topic is the compacted changelog topic of the store (shared by all its partitions).
func (id ID) Topic() string {
	return topic.Changelog(id.App, id.View, id.Version, id.Store)
}

// String formats the ID as "<changelog topic>/<partition>", the form used in logs and errors.
func (id ID) String() string {
	return id.Topic() + "/" + strconv.FormatInt(int64(id.Partition), 10)
}

// Validate reports every problem with the ID at once.
func (id ID) Validate() error {
	var errs []error
	for _, n := range []struct{ kind, s string }{{"app", id.App}, {"view", id.View}, {"store", id.Store}} {
		if err := topic.ValidateName(n.kind, n.s); err != nil {
			errs = append(errs, err)
		}
	}
	if id.Version < 0 {
		errs = append(errs, fmt.Errorf("state: version %d is negative", id.Version))
	}
	if id.Partition < 0 {
		errs = append(errs, fmt.Errorf("state: partition %d is negative", id.Partition))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidID, err)
	}
	return nil
}
