package views

import (
	"context"
	"fmt"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// produceFailed is the error of a batch whose records Kafka did not all take. Anything but a
// refusal for size may pass on a new client (errRecreate). A refusal for size means a
// topic's max.message.bytes is below what the runtime read at start (lowered since): the
// next session reads the limits again (relearnLimits), so that the redone batch
// dead-letters the record. Refused again after that, redoing would not help: the view stops
// with the fix in the message rather than retry for ever.
func (e *engine) produceFailed(err error) error {
	if !topic.IsTooLarge(err) {
		return fmt.Errorf("%w: %w", errRecreate, err)
	}
	if e.sizeRefused {
		return refusedForSize(e.v.name, e.rt.cfg.MaxRecordBytes, err)
	}
	e.sizeRefused = true
	return fmt.Errorf("%w: Kafka refused a record for its size; the topics' limits are read again and the batch redone: %w", errRecreate, err)
}

// relearnLimits reads the limits of the view's topics again after Kafka refused a record for
// its size.
func (e *engine) relearnLimits(ctx context.Context) error {
	if !e.sizeRefused {
		return nil
	}
	cl, err := kgo.NewClient(e.base...)
	if err != nil {
		return fmt.Errorf("views: view %q: kafka client: %w", e.v.name, err)
	}
	defer cl.Close()
	if err := e.env.limits.Check(ctx, kadm.NewClient(cl), e.log, e.written...); err != nil {
		return fmt.Errorf("%w: views: view %q: %w", errRecreate, e.v.name, err)
	}
	return nil
}

// refusedForSize is the permanent error of a record Kafka refused for its size although it
// was within the limit the runtime knew for its topic.
func refusedForSize(view Name, maxRecord int32, err error) error {
	return fmt.Errorf("views: view %q: Kafka refused a record as too large that is within the limit tarn read for its topic "+
		"(was the topic's max.message.bytes lowered?): %w; raise it (kafka-configs --alter --entity-type topics --entity-name <topic> "+
		"--add-config max.message.bytes=%d), or restart: tarn then reads the lower limit and dead-letters records above it",
		view, err, topic.MaxMessageBytes(maxRecord))
}
