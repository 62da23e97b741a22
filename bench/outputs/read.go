package outputs

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrConfig is wrapped by errors about the arguments of [Read] and [KindOf]; use errors.Is.
var ErrConfig = errors.New("outputs: bad arguments")

// Read calls fn with every data record of topicName, each partition in offset order, from the
// partition's start to the last stable offset it had when Read began (read_committed, so
// records of aborted transactions are skipped). opts are added to the Kafka client (TLS,
// SASL, tuning).
func Read(ctx context.Context, brokers []string, topicName string, fn func(r *kgo.Record) error, opts ...kgo.Opt) error {
	if len(brokers) == 0 || topicName == "" {
		return fmt.Errorf("%w: Read needs brokers and a topic", ErrConfig)
	}
	base := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)
	left, assign, err := ranges(ctx, base, topicName)
	if err != nil || len(left) == 0 {
		return err
	}
	cl, err := kgo.NewClient(append(base,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topicName: assign}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records tell where a partition that ends with a transaction marker ends.
		kgo.KeepControlRecords())...)
	if err != nil {
		return fmt.Errorf("outputs: kafka client: %w", err)
	}
	defer cl.Close()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("outputs: %s: %d partitions not read to their end: %w", topicName, len(left), err)
		}
		if err := fs.Err0(); err != nil {
			return fmt.Errorf("outputs: fetch %s: %w", topicName, err)
		}
		for _, r := range fs.Records() {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				continue
			}
			if !r.Attrs.IsControl() {
				if err := fn(r); err != nil {
					return err
				}
			}
			if r.Offset == end-1 {
				delete(left, r.Partition)
			}
		}
	}
	return nil
}

// ranges returns, for every partition of topicName that holds records, its last stable offset
// and the offset to start reading at.
func ranges(ctx context.Context, base []kgo.Opt, topicName string) (map[int32]int64, map[int32]kgo.Offset, error) {
	cl, err := kgo.NewClient(base...)
	if err != nil {
		return nil, nil, fmt.Errorf("outputs: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topicName)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("outputs: start offsets of %s: %w", topicName, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topicName)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("outputs: last stable offsets of %s: %w", topicName, err)
	}
	left, assign := map[int32]int64{}, map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if start := starts[o.Topic][o.Partition].Offset; o.Offset > start {
			left[o.Partition], assign[o.Partition] = o.Offset, kgo.NewOffset().At(start)
		}
	})
	return left, assign, nil
}
