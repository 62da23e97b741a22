package cdc

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrRecordTooLarge: Kafka refused a record for its size although it was within the limit the
// source read for its topic at start (the topic's max.message.bytes was lowered since). A
// record above the known limit never gets here: it is dead-lettered. Use errors.Is.
var ErrRecordTooLarge = errors.New("cdc: Kafka refused a record as too large")

// tooLarge turns a row change above its table topic's size limit into a dead letter, so that
// the source goes on instead of failing on it (and on every retry) for ever. The dead letter
// has the row's key and CDC headers, its size and the limit, but no value. The table topic
// then lacks that change: views keep the row's previous value (or lack the row) until a later
// change of it fits.
type tooLarge struct {
	limits   *topic.Limits
	max      int32 // Config.MaxRecordBytes
	dlq      string
	dlqParts int32
	tables   map[string]string // table topic → schema-qualified table
	counter  *prometheus.CounterVec
	log      *slog.Logger
}

// check returns the dead letter that replaces r, or nil when r fits its topic.
func (d *tooLarge) check(r *kgo.Record) *kgo.Record {
	size := topic.RecordSize(r)
	if size <= d.limits.Min() {
		return nil
	}
	limit := d.limits.Of(r.Topic)
	if size <= limit {
		return nil
	}
	table := d.tables[r.Topic]
	key := r.Key
	if half := d.limits.Of(d.dlq) / 2; len(key) > half {
		key = key[:half]
	}
	lsn, _ := header(r, HeaderLSN)
	detail := fmt.Sprintf("row change of %s (LSN %s) is %d bytes, above the limit of %d bytes of topic %s (MaxRecordBytes, or the topic's max.message.bytes)",
		table, lsn, size, limit, r.Topic)
	hs := append(slices.Clone(r.Headers),
		kgo.RecordHeader{Key: "tarn.reason", Value: []byte(topic.ReasonTooLarge)},
		kgo.RecordHeader{Key: "tarn.detail", Value: []byte(detail)},
		kgo.RecordHeader{Key: "tarn.source", Value: []byte("cdc")},
		kgo.RecordHeader{Key: "tarn.table", Value: []byte(table)},
		kgo.RecordHeader{Key: "tarn.target", Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: "tarn.size", Value: []byte(strconv.Itoa(size))},
		kgo.RecordHeader{Key: "tarn.limit", Value: []byte(strconv.Itoa(limit))},
	)
	d.counter.WithLabelValues(table, topic.ReasonTooLarge).Inc()
	d.log.Warn("cdc: row change above the size limit sent to the dead-letter topic; views keep the row's previous value",
		"table", table, "key", string(key), "bytes", size, "limit", limit, "lsn", string(lsn), "dlq", d.dlq)
	return &kgo.Record{Topic: d.dlq, Partition: r.Partition % d.dlqParts, Key: key, Headers: hs}
}

func (r *runner) tooLarge(limits *topic.Limits, dlqParts int32) tooLarge {
	d := tooLarge{limits: limits, max: r.cfg.MaxRecordBytes, dlq: topic.DLQ(r.cfg.App), dlqParts: dlqParts,
		tables: map[string]string{}, counter: r.m.deadLetters, log: r.log}
	for _, t := range r.tables {
		d.tables[t.topic] = t.qualified
	}
	return d
}
