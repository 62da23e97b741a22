package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	tarntopic "github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// changelogPolicy is the only cleanup policy a changelog may have: "delete" would lose the
// latest value of keys that are not rewritten, and restore would silently miss them.
const changelogPolicy = "compact"

// EnsureChangelog creates a store's changelog topic with the store's partition count,
// cleanup.policy=compact and a max.message.bytes that takes values of up to maxRecordBytes
// (0: 16 MiB), or, if it exists, checks partitions and policy and fails with
// ErrChangelogMismatch naming the topic, what is wanted and what was found. An existing
// topic's max.message.bytes is not changed here: the caller learns it (topic.Limits) and
// refuses larger writes. replicationFactor -1 uses the broker's default.
func EnsureChangelog(ctx context.Context, adm *kadm.Client, topic string, partitions int32, replicationFactor int16, maxRecordBytes int32) error {
	if maxRecordBytes == 0 {
		maxRecordBytes = tarntopic.DefaultMaxRecordBytes
	}
	policy := changelogPolicy
	configs := map[string]*string{"cleanup.policy": &policy, tarntopic.MaxMessageBytesKey: tarntopic.MaxMessageBytesValue(maxRecordBytes)}
	resp, err := adm.CreateTopic(ctx, partitions, replicationFactor, configs, topic)
	if err == nil {
		err = resp.Err
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.TopicAlreadyExists):
		return checkChangelog(ctx, adm, topic, partitions)
	default:
		return fmt.Errorf("state: create changelog %s: %w", topic, err)
	}
}

// checkChangelog compares an existing changelog topic with what its store needs.
func checkChangelog(ctx context.Context, adm *kadm.Client, topic string, partitions int32) error {
	got, err := partitionCount(ctx, adm, topic)
	if err != nil {
		return err
	}
	policy, err := cleanupPolicy(ctx, adm, topic)
	if err != nil {
		return err
	}
	var problems []string
	if got != partitions {
		problems = append(problems, fmt.Sprintf("want %d partitions, got %d", partitions, got))
	}
	if policy != changelogPolicy {
		problems = append(problems, fmt.Sprintf("want cleanup.policy=%s, got %q", changelogPolicy, policy))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: topic %s: %s; delete the topic (its store is rebuilt from its inputs) or fix it by hand",
			ErrChangelogMismatch, topic, strings.Join(problems, "; "))
	}
	return nil
}

// partitionCount returns the partitions of an existing topic. A topic created a moment ago
// (by another instance starting at the same time) can be missing from metadata for a short
// while, so absence is retried a few times before it is an error.
func partitionCount(ctx context.Context, adm *kadm.Client, topic string) (int32, error) {
	const attempts = 150 // 15 s: brokers under load take seconds to show a new topic
	for i := 0; ; i++ {
		details, err := adm.ListTopics(ctx, topic)
		if err == nil {
			err = details.Error()
		}
		n := int32(len(details[topic].Partitions))
		if err == nil && n > 0 {
			return n, nil
		}
		retry := err == nil || errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.LeaderNotAvailable)
		if !retry || i == attempts-1 {
			if err == nil {
				err = errors.New("no partitions in metadata")
			}
			return 0, fmt.Errorf("state: describe changelog %s: %w", topic, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func cleanupPolicy(ctx context.Context, adm *kadm.Client, topic string) (string, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return "", fmt.Errorf("state: describe configs of changelog %s: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return "", fmt.Errorf("state: describe configs of changelog %s: %w", topic, err)
	}
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			return *c.Value, nil
		}
	}
	return "", nil
}
