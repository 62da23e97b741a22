package topic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Bounds of the largest record tarn writes (Config.MaxRecordBytes of cdc, views and tarn).
const (
	// DefaultMaxRecordBytes is 16 MiB: enough for rows with large TOASTed columns, well
	// above Kafka's 1 MiB default.
	DefaultMaxRecordBytes = 16 << 20
	// MinRecordBytes is Kafka's own default; a smaller maximum gains nothing.
	MinRecordBytes = 1 << 20
	// MaxRecordBytes keeps one record, in one produce request, below the broker's
	// socket.request.max.bytes and franz-go's BrokerMaxWriteBytes (both 100 MiB by default).
	MaxRecordBytes = 64 << 20
)

// framing is what Kafka counts against max.message.bytes besides a record's key, value and
// headers: the batch header (61 bytes) and the varints framing the record and each header
// (at most 10 bytes a header). 1 KiB covers records with up to 90 headers.
const framing = 1 << 10

// MaxMessageBytes is the max.message.bytes tarn gives the topics it creates, and the producer
// batch limit it uses for them, so that a record of RecordSize maxRecord fits.
func MaxMessageBytes(maxRecord int32) int32 { return maxRecord + framing }

// RecordSize is what a record weighs against a limit: key, value and every header's key and
// value.
func RecordSize(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// ReasonTooLarge is the tarn.reason header of the dead letters of records above their topic's
// limit, whichever component wrote them.
const ReasonTooLarge = "too-large"

// IsTooLarge reports whether err is Kafka refusing a record (or its batch) for its size:
// permanent for that record, so it must not be retried as it is.
func IsTooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// ValidateMaxRecordBytes checks a configured maximum against the bounds above.
func ValidateMaxRecordBytes(n int32) error {
	if n < MinRecordBytes || n > MaxRecordBytes {
		return fmt.Errorf("MaxRecordBytes %d is not in [1 MiB, 64 MiB]", n)
	}
	return nil
}

// Limits is the largest record each topic a component writes takes: the configured maximum,
// or less where an existing topic's max.message.bytes is smaller. Records above their topic's
// limit are dead-lettered before they are produced, never sent to be refused and retried.
// Fill it with [Limits.Check] before the component produces; Check may run again later (after
// Kafka refused a record for its size) while others read. It is safe for concurrent use: a
// Check publishes a new snapshot, so reads on hot paths take no lock. A nil *Limits has no
// limits.
type Limits struct {
	max  int32
	snap atomic.Pointer[limitSnap]
	mu   sync.Mutex // serialises Checks
}

// limitSnap is what one Check learned; never changed once published.
type limitSnap struct {
	min    int
	topics map[string]int32 // max.message.bytes of topics below MaxMessageBytes(max)
}

// NewLimits returns the limits of a component configured with maxRecord.
func NewLimits(maxRecord int32) *Limits {
	l := &Limits{max: maxRecord}
	l.snap.Store(&limitSnap{min: int(maxRecord), topics: map[string]int32{}})
	return l
}

// Max is the configured maximum.
func (l *Limits) Max() int32 {
	if l == nil {
		return DefaultMaxRecordBytes
	}
	return l.max
}

// Min is the smallest limit of any topic: a record no larger fits everywhere, which saves
// building a topic name on hot paths.
func (l *Limits) Min() int {
	if l == nil {
		return math.MaxInt
	}
	return l.snap.Load().min
}

// Of is the largest RecordSize topic t takes.
func (l *Limits) Of(t string) int {
	if l == nil {
		return math.MaxInt
	}
	if m, ok := l.snap.Load().topics[t]; ok {
		return int(max(m-framing, 0))
	}
	return int(l.max)
}

// BatchBytes is the producer batch limit of topic t, for kgo.ProducerBatchMaxBytesFn: a
// batch above a topic's max.message.bytes would fail every record in it.
func (l *Limits) BatchBytes(t string) int32 {
	if l == nil {
		return MaxMessageBytes(DefaultMaxRecordBytes)
	}
	if m, ok := l.snap.Load().topics[t]; ok {
		return max(m, 512) // franz-go's floor
	}
	return MaxMessageBytes(l.max)
}

// Check reads the max.message.bytes of the named existing topics (the broker's
// message.max.bytes when a topic does not override it) and notes each one below
// MaxMessageBytes(max), with a warning on log that names the topic and the command that
// raises its limit. tarn starts anyway: records up to the smaller limit pass and larger ones
// go to the dead-letter topic, which beats refusing to serve every view over one old topic.
// A limit once learned is only ever lowered, by a later Check.
func (l *Limits) Check(ctx context.Context, adm *kadm.Client, log *slog.Logger, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return fmt.Errorf("topic: describe configs of %v: %w", names, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.snap.Load()
	next := &limitSnap{min: old.min, topics: maps.Clone(old.topics)}
	want := MaxMessageBytes(l.max)
	for _, rc := range rcs {
		if rc.Err != nil {
			return fmt.Errorf("topic: describe configs of %s: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key != MaxMessageBytesKey || c.Value == nil {
				continue
			}
			got, err := strconv.ParseInt(*c.Value, 10, 32)
			if err != nil || int32(got) >= want {
				break
			}
			if known, ok := next.topics[rc.Name]; ok && known <= int32(got) {
				break
			}
			next.topics[rc.Name] = int32(got)
			next.min = min(next.min, int(max(int32(got)-framing, 0)))
			log.Warn("topic: existing topic takes smaller records than the configured maximum; larger records go to the dead-letter topic",
				"topic", rc.Name, "max_message_bytes", got, "max_record_bytes", l.max,
				"fix", fmt.Sprintf("kafka-configs --bootstrap-server <broker> --alter --entity-type topics --entity-name %s --add-config max.message.bytes=%d", rc.Name, want))
		}
	}
	l.snap.Store(next)
	return nil
}

// MaxMessageBytesKey is the topic config that bounds a record batch.
const MaxMessageBytesKey = "max.message.bytes"

// MaxMessageBytesValue is the MaxMessageBytesKey value, for CreateTopic, of a topic holding
// records up to maxRecord.
func MaxMessageBytesValue(maxRecord int32) *string {
	v := strconv.Itoa(int(MaxMessageBytes(maxRecord)))
	return &v
}

// FetchOpts sizes a consumer for records up to maxRecord. Kafka returns a partition's first
// batch even when it is larger than the fetch limits, so these do not decide whether a big
// record can be read; they keep a partition's share of a fetch at least one whole record, and
// the client's response limit (BrokerMaxReadBytes) above the fetch limit, which franz-go
// requires.
func FetchOpts(maxRecord int32) []kgo.Opt {
	part := MaxMessageBytes(maxRecord)
	total := max(50<<20, 2*part) // franz-go's default FetchMaxBytes is 50 MiB
	return []kgo.Opt{kgo.FetchMaxPartitionBytes(part), kgo.FetchMaxBytes(total), kgo.BrokerMaxReadBytes(2 * total)}
}
