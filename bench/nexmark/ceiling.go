package nexmark

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ConsumeStats is what [Consume] read.
type ConsumeStats struct {
	Records  int64
	Bytes    int64 // key and value bytes
	Duration time.Duration
}

// RecordsPerSecond returns Records over Duration.
func (s ConsumeStats) RecordsPerSecond() float64 {
	if s.Duration <= 0 {
		return 0
	}
	return float64(s.Records) / s.Duration.Seconds()
}

// Consume reads every partition of topics from its start offset to the end offset it had when
// Consume began, touching each record's key and value but decoding nothing: the most any
// processor on this broker can read. It is the ceiling of the benchmark.
func Consume(ctx context.Context, brokers []string, topics []string) (ConsumeStats, error) {
	if len(brokers) == 0 || len(topics) == 0 {
		return ConsumeStats{}, fmt.Errorf("%w: Consume needs brokers and topics", ErrConfig)
	}
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		return ConsumeStats{}, fmt.Errorf("nexmark: kafka client: %w", err)
	}
	starts, ends, err := offsetRange(ctx, kadm.NewClient(adm), topics)
	adm.Close()
	if err != nil {
		return ConsumeStats{}, err
	}
	left := map[string]map[int32]int64{} // next offset still to read, by topic and partition
	assign := map[string]map[int32]kgo.Offset{}
	var want int64
	ends.Each(func(o kadm.ListedOffset) {
		start := starts[o.Topic][o.Partition].Offset
		if o.Offset <= start {
			return
		}
		if left[o.Topic] == nil {
			left[o.Topic], assign[o.Topic] = map[int32]int64{}, map[int32]kgo.Offset{}
		}
		left[o.Topic][o.Partition] = o.Offset
		assign[o.Topic][o.Partition] = kgo.NewOffset().At(start)
		want += o.Offset - start
	})
	begin := time.Now()
	if want == 0 {
		return ConsumeStats{}, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(assign),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(16<<20),
		kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		return ConsumeStats{}, fmt.Errorf("nexmark: kafka client: %w", err)
	}
	defer cl.Close()
	return drain(ctx, cl, left, begin)
}

// drain polls until every partition in left reached its end offset.
func drain(ctx context.Context, cl *kgo.Client, left map[string]map[int32]int64, begin time.Time) (ConsumeStats, error) {
	var s ConsumeStats
	open := 0
	for _, ps := range left {
		open += len(ps)
	}
	for open > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return s, err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = errors.Join(ferr, fmt.Errorf("%s/%d: %w", t, p, err)) })
		if ferr != nil {
			return s, fmt.Errorf("nexmark: fetch: %w", ferr)
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			end, ok := left[p.Topic][p.Partition]
			for _, r := range p.Records {
				if r.Offset >= end || !ok {
					break
				}
				s.Records++
				s.Bytes += int64(len(r.Key) + len(r.Value))
			}
			if n := len(p.Records); ok && n > 0 && p.Records[n-1].Offset >= end-1 {
				delete(left[p.Topic], p.Partition)
				open--
			}
		})
	}
	s.Duration = time.Since(begin)
	return s, nil
}

// offsetRange lists the start and end offsets of every partition of topics.
func offsetRange(ctx context.Context, adm *kadm.Client, topics []string) (kadm.ListedOffsets, kadm.ListedOffsets, error) {
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("nexmark: list start offsets of %v: %w", topics, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("nexmark: list end offsets of %v: %w", topics, err)
	}
	return starts, ends, nil
}
