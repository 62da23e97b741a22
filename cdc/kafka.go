package cdc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// position is the source's durable place in the replication stream, written to the position
// topic with (in transactional mode: in the same Kafka transaction as) the records it covers.
type position struct {
	// Resume is where streaming restarts: the end LSN of the last written transaction, or the
	// LSN of a later heartbeat. Every transaction that committed before it is written.
	Resume LSN `json:"resume"`
	// Commit is the commit LSN of the last written transaction (the consistent point after a
	// snapshot): records with a larger HeaderLSN are not covered.
	Commit   LSN    `json:"commit"`
	SystemID string `json:"system_id"`
	Timeline int32  `json:"timeline"`
}

// kafkaOpts are the options of every client of the source: consumers sized for records up to
// MaxRecordBytes (the row state is rebuilt from the table topics), then KafkaOptions.
func (c *Config) kafkaOpts() []kgo.Opt {
	opts := topic.FetchOpts(c.MaxRecordBytes)
	if len(c.Brokers) > 0 {
		opts = append(opts, kgo.SeedBrokers(c.Brokers...))
	}
	return append(opts, c.KafkaOptions...)
}

// deliveryTimeout bounds how long the source waits for Kafka to take a record.
const deliveryTimeout = 30 * time.Second

// newProducer makes the client that writes table topics. Partitions are set on each record by
// partition.For, so the manual partitioner is used. Batches are bounded per topic by limits,
// which ensureTopics fills before anything is produced: a batch above a topic's
// max.message.bytes would fail every record in it. The bytes buffered are bounded too (to
// eight records of the maximum; small rows never reach it): a snapshot of large rows reads
// Postgres faster than Kafka acknowledges, and 50000 buffered rows of megabytes each would
// not fit in memory. A record Kafka does not take within deliveryTimeout fails its batch, so
// that a broker outage ends the run (a transient failure: retried with backoff and shown as
// failing) instead of stalling it while it reports itself up.
func newProducer(c *Config, limits *topic.Limits) (*kgo.Client, error) {
	opts := append(c.kafkaOpts(),
		kgo.RecordDeliveryTimeout(deliveryTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytesFn(limits.BatchBytes),
		kgo.MaxBufferedRecords(50000),
		kgo.MaxBufferedBytes(8*int(topic.MaxMessageBytes(c.MaxRecordBytes))),
		kgo.ProducerLinger(0),
	)
	if c.Transactional {
		opts = append(opts, kgo.TransactionalID(c.TransactionalID), kgo.TransactionTimeout(c.TransactionTimeout))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: Kafka options: %w", ErrConfig, err)
	}
	return cl, nil
}

// ensureTopics creates the table topics and the position topic, compacted, and the
// dead-letter topic, and checks the partition count of those that exist (but the
// dead-letter topic's, which the views runtime may have created: its count is returned). It
// then reads the size limits of the table and dead-letter topics into limits.
func ensureTopics(ctx context.Context, adm *kadm.Client, c *Config, tables []*table, posTopic string, limits *topic.Limits) (int32, error) {
	want := map[string]int32{posTopic: 1}
	var written []string
	for _, t := range tables {
		want[t.topic] = t.partitions
		written = append(written, t.topic)
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return 0, fmt.Errorf("cdc: list topics: %w", err)
	}
	configs := map[string]*string{"cleanup.policy": new("compact"), topic.MaxMessageBytesKey: topic.MaxMessageBytesValue(c.MaxRecordBytes)}
	for _, name := range names {
		if d, ok := details[name]; ok && d.Err == nil {
			if got := int32(len(d.Partitions)); got != want[name] {
				return 0, fmt.Errorf("%w: topic %s has %d partitions, configured %d; recreate the topic or change Partitions", ErrPartitions, name, got, want[name])
			}
			continue
		}
		if err := createTopic(ctx, adm, want[name], c.ReplicationFactor, configs, name); err != nil {
			return 0, err
		}
	}
	dlq := topic.DLQ(c.App)
	dlqParts, err := ensureDLQ(ctx, adm, c, dlq)
	if err != nil {
		return 0, err
	}
	if err := limits.Check(ctx, adm, c.Logger, append(written, dlq)...); err != nil {
		return 0, fmt.Errorf("cdc: %w", err)
	}
	return dlqParts, nil
}

func createTopic(ctx context.Context, adm *kadm.Client, partitions int32, rf int16, configs map[string]*string, name string) error {
	resp, err := adm.CreateTopic(ctx, partitions, rf, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !isTopicExists(err) {
		return fmt.Errorf("cdc: create topic %s: %w", name, err)
	}
	return nil
}

// ensureDLQ creates the application's dead-letter topic unless it exists, and returns its
// partition count (a topic created a moment ago may take a moment to show its partitions).
func ensureDLQ(ctx context.Context, adm *kadm.Client, c *Config, name string) (int32, error) {
	configs := map[string]*string{topic.MaxMessageBytesKey: topic.MaxMessageBytesValue(c.MaxRecordBytes)}
	if err := createTopic(ctx, adm, c.Partitions, c.ReplicationFactor, configs, name); err != nil {
		return 0, err
	}
	for {
		details, err := adm.ListTopics(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("cdc: describe topic %s: %w", name, err)
		}
		if n := len(details[name].Partitions); n > 0 {
			return int32(n), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// isTopicExists: another instance (or a previous attempt) created the topic meanwhile.
func isTopicExists(err error) bool { return errors.Is(err, kerr.TopicAlreadyExists) }

// sink writes batches of records. In transactional mode a batch is one Kafka transaction; in
// at-least-once mode it ends with a flush. A batch is confirmed only by commit.
type sink struct {
	cl       *kgo.Client
	txn      bool
	posTopic string
	slot     string
	open     bool
	records  int
	tooLarge tooLarge
	mu       struct {
		sync.Mutex
		err error
	}
}

func (s *sink) promise(r *kgo.Record, err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	if s.mu.err == nil {
		s.mu.err = fmt.Errorf("record of %d bytes for %s: %w", topic.RecordSize(r), r.Topic, err)
	}
	s.mu.Unlock()
}

func (s *sink) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.err
}

func (s *sink) begin() error {
	if s.open {
		return nil
	}
	if s.txn {
		if err := s.cl.BeginTransaction(); err != nil {
			return fmt.Errorf("cdc: begin Kafka transaction: %w", err)
		}
	}
	s.open = true
	return nil
}

// add produces r within the open batch (opening one if needed).
func (s *sink) add(ctx context.Context, r *kgo.Record) error {
	if err := s.begin(); err != nil {
		return err
	}
	if dl := s.tooLarge.check(r); dl != nil {
		r = dl
	}
	s.records++
	s.cl.Produce(ctx, r, s.promise)
	if err := s.failed(); err != nil {
		return s.refusal(fmt.Errorf("cdc: produce to %s: %w", r.Topic, err))
	}
	return nil
}

// refusal is err, a record Kafka did not take; a refusal for its size would be repeated on
// every retry, so it becomes ErrRecordTooLarge with the fix.
func (s *sink) refusal(err error) error {
	if !topic.IsTooLarge(err) {
		return err
	}
	want := topic.MaxMessageBytes(s.tooLarge.max)
	return fmt.Errorf("%w: %w; was the topic's max.message.bytes lowered since the source started? raise it to %d "+
		"(kafka-configs --alter --entity-type topics --entity-name <topic> --add-config max.message.bytes=%d), "+
		"or restart the source, which then dead-letters larger rows", ErrRecordTooLarge, err, want, want)
}

// commit makes the open batch durable, with pos when it is not nil. Only after commit returns
// nil may the slot be told anything the batch covers.
func (s *sink) commit(ctx context.Context, pos *position) error {
	if !s.open && pos == nil {
		return nil
	}
	if err := s.begin(); err != nil {
		return err
	}
	if s.txn && pos != nil {
		if err := s.producePosition(ctx, pos); err != nil {
			return err
		}
	}
	if err := s.flush(ctx); err != nil {
		return err
	}
	if !s.txn && pos != nil {
		// At-least-once: the position is written only after every record it covers is acked.
		if err := s.producePosition(ctx, pos); err != nil {
			return err
		}
		if err := s.flush(ctx); err != nil {
			return err
		}
	}
	if s.txn {
		if err := s.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			return fmt.Errorf("cdc: commit Kafka transaction: %w", err)
		}
	}
	s.open, s.records = false, 0
	return nil
}

func (s *sink) producePosition(ctx context.Context, pos *position) error {
	v, err := json.Marshal(pos)
	if err != nil {
		return fmt.Errorf("cdc: encode position: %w", err)
	}
	s.cl.Produce(ctx, &kgo.Record{Topic: s.posTopic, Partition: 0, Key: []byte(s.slot), Value: v}, s.promise)
	return nil
}

func (s *sink) flush(ctx context.Context) error {
	if err := s.cl.Flush(ctx); err != nil {
		return fmt.Errorf("cdc: flush to Kafka: %w", err)
	}
	if err := s.failed(); err != nil {
		return s.refusal(fmt.Errorf("cdc: Kafka refused a record: %w", err))
	}
	return nil
}

// abort ends an open batch without confirming it; in transactional mode its records are
// discarded, in at-least-once mode they may remain and are written again after a restart.
func (s *sink) abort(ctx context.Context) error {
	if !s.open {
		return nil
	}
	s.open, s.records = false, 0
	if !s.txn {
		return nil
	}
	if err := s.cl.AbortBufferedRecords(ctx); err != nil {
		return fmt.Errorf("cdc: abort buffered records: %w", err)
	}
	return s.cl.EndTransaction(ctx, kgo.TryAbort)
}

// readPosition reads the last committed position of the slot. In transactional mode the
// producer's id is loaded first: that fences a previous incarnation and completes or aborts
// its open transaction, so the position read is final.
func readPosition(ctx context.Context, c *Config, producer *kgo.Client, posTopic string) (*position, error) {
	if c.Transactional {
		if _, _, err := producer.ProducerID(ctx); err != nil {
			return nil, fmt.Errorf("cdc: initialize Kafka transactional producer %s: %w", c.TransactionalID, err)
		}
	}
	var pos *position
	err := readToEnd(ctx, c.kafkaOpts(), []string{posTopic}, func(r *kgo.Record) error {
		if string(r.Key) != c.Slot {
			return nil
		}
		p := new(position)
		if err := json.Unmarshal(r.Value, p); err != nil {
			return fmt.Errorf("cdc: position record at %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		pos = p
		return nil
	})
	return pos, err
}

// readToEnd calls fn for every committed record of the topics, from the start to the last
// stable offset as of the call. Control records are kept by the consumer only so that the end
// is recognised when a partition ends in transaction markers; fn does not see them.
func readToEnd(ctx context.Context, base []kgo.Opt, topics []string, fn func(*kgo.Record) error) error {
	admCl, err := kgo.NewClient(base...)
	if err != nil {
		return fmt.Errorf("%w: Kafka options: %w", ErrConfig, err)
	}
	starts, ends, err := listOffsets(ctx, kadm.NewClient(admCl), topics)
	admCl.Close()
	if err != nil {
		return fmt.Errorf("cdc: list offsets of %v: %w", topics, err)
	}
	want := map[string]map[int32]kgo.Offset{}
	remaining := map[string]map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(o.Topic, o.Partition)
		if o.Offset <= s.Offset {
			return
		}
		if want[o.Topic] == nil {
			want[o.Topic], remaining[o.Topic] = map[int32]kgo.Offset{}, map[int32]int64{}
		}
		want[o.Topic][o.Partition] = kgo.NewOffset().At(s.Offset)
		remaining[o.Topic][o.Partition] = o.Offset
	})
	if len(want) == 0 {
		return nil
	}
	return consumeUntil(ctx, base, want, remaining, fn)
}

// listOffsets lists the start and last stable offsets of the topics. Right after a topic is
// created its partitions may not have a leader yet, so retriable errors are retried for a while.
func listOffsets(ctx context.Context, adm *kadm.Client, topics []string) (starts, ends kadm.ListedOffsets, err error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ends, err = adm.ListCommittedOffsets(ctx, topics...)
		if err == nil {
			err = ends.Error()
		}
		if err == nil {
			starts, err = adm.ListStartOffsets(ctx, topics...)
			if err == nil {
				err = starts.Error()
			}
		}
		if err == nil || !kerr.IsRetriable(err) || time.Now().After(deadline) {
			return starts, ends, err
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func consumeUntil(ctx context.Context, base []kgo.Opt, want map[string]map[int32]kgo.Offset, remaining map[string]map[int32]int64, fn func(*kgo.Record) error) error {
	cl, err := kgo.NewClient(append(base,
		kgo.ConsumePartitions(want),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxBytes(64<<20),
	)...)
	if err != nil {
		return fmt.Errorf("%w: Kafka options: %w", ErrConfig, err)
	}
	defer cl.Close()
	left := 0
	for _, ps := range remaining {
		left += len(ps)
	}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("cdc: read %s/%d: %w", t, p, err) })
		if ferr != nil {
			return ferr
		}
		var cbErr error
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Topic][r.Partition]
			if !ok || cbErr != nil {
				return
			}
			if r.Offset < end && !r.Attrs.IsControl() {
				cbErr = fn(r)
			}
			if r.Offset >= end-1 {
				delete(remaining[r.Topic], r.Partition)
				left--
			}
		})
		if cbErr != nil {
			return cbErr
		}
	}
	return nil
}
